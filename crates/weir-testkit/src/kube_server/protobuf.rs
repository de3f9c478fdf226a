//! The Kubernetes protobuf request bodies kubectl's generators send, decoded by hand for the
//! two kinds they are sent for here: `kubectl create namespace NAME` and `kubectl create
//! configmap NAME --from-literal=...` POST a `v1` `Namespace` / `ConfigMap` as
//! `application/vnd.kubernetes.protobuf` (and accept `application/json` answers).
//!
//! The envelope: the 4 bytes `k8s\0`, then a `runtime.Unknown` message: `typeMeta` = 1
//! (`apiVersion` = 1, `kind` = 2), `raw` = 2 (the object's own message), `contentEncoding` = 3,
//! `contentType` = 4. In the object: `metadata` = 1 (`ObjectMeta`: `name` = 1, `generateName`
//! = 2, `namespace` = 3, `labels` = 11, `annotations` = 12, `finalizers` = 14; maps are repeated
//! entries with `key` = 1, `value` = 2); a Namespace's `spec` = 2 (`finalizers` = 1); a
//! ConfigMap's `data` = 2, `binaryData` = 3, `immutable` = 4. The Go encoder writes every string
//! field, empty ones included: an empty string is read as absent. Unknown fields are skipped.

use base64::Engine;
use serde_json::{Map, Value, json};

/// The media type of Kubernetes protobuf bodies.
pub(crate) const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The envelope's first bytes.
const MAGIC: &[u8; 4] = b"k8s\0";

/// One field's value on the wire.
enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    /// A fixed 32- or 64-bit value (skipped).
    Fixed,
}

/// Reads the fields of one message in order.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, at: 0 }
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self
                .bytes
                .get(self.at)
                .ok_or("the message ends inside a varint")?;
            self.at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("a varint longer than 10 bytes".to_owned())
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(len)
            .filter(|end| *end <= self.bytes.len())
            .ok_or("a field runs past the end of its message")?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    /// The next field (number and value), `None` at the end of the message.
    fn field(&mut self) -> Result<Option<(u64, Wire<'a>)>, String> {
        if self.at >= self.bytes.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let value = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Wire::Fixed
            }
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|e| e.to_string())?;
                Wire::Bytes(self.take(len)?)
            }
            5 => {
                self.take(4)?;
                Wire::Fixed
            }
            other => return Err(format!("wire type {other} (groups) is not supported")),
        };
        Ok(Some((key >> 3, value)))
    }
}

fn text(bytes: &[u8]) -> Result<String, String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| "a string field is not UTF-8".to_owned())
}

/// Every field of `message`, each given to `each`.
fn fields<'a>(
    message: &'a [u8],
    mut each: impl FnMut(u64, Wire<'a>) -> Result<(), String>,
) -> Result<(), String> {
    let mut reader = Reader::new(message);
    while let Some((number, value)) = reader.field()? {
        each(number, value)?;
    }
    Ok(())
}

/// A non-empty string field into `object[key]`.
fn put_text(object: &mut Map<String, Value>, key: &str, value: &Wire<'_>) -> Result<(), String> {
    if let Wire::Bytes(bytes) = value
        && !bytes.is_empty()
    {
        object.insert(key.to_owned(), Value::String(text(bytes)?));
    }
    Ok(())
}

/// A repeated string field appended to `object[key]`.
fn push_text(object: &mut Map<String, Value>, key: &str, value: &Wire<'_>) -> Result<(), String> {
    if let Wire::Bytes(bytes) = value {
        let list = object
            .entry(key.to_owned())
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(list) = list {
            list.push(Value::String(text(bytes)?));
        }
    }
    Ok(())
}

/// One map entry (`key` = 1, `value` = 2) into `object[key]`; `binary` values as base64.
fn put_entry(
    object: &mut Map<String, Value>,
    key: &str,
    value: &Wire<'_>,
    binary: bool,
) -> Result<(), String> {
    let Wire::Bytes(entry) = value else {
        return Ok(());
    };
    let (mut name, mut content) = (String::new(), Value::String(String::new()));
    fields(entry, |number, value| {
        match (number, value) {
            (1, Wire::Bytes(bytes)) => name = text(bytes)?,
            (2, Wire::Bytes(bytes)) if binary => {
                content = Value::String(base64::engine::general_purpose::STANDARD.encode(bytes));
            }
            (2, Wire::Bytes(bytes)) => content = Value::String(text(bytes)?),
            _ => {}
        }
        Ok(())
    })?;
    if let Value::Object(map) = object
        .entry(key.to_owned())
        .or_insert_with(|| Value::Object(Map::new()))
    {
        map.insert(name, content);
    }
    Ok(())
}

/// `ObjectMeta`: what a create may carry.
fn object_meta(message: &[u8]) -> Result<Value, String> {
    let mut meta = Map::new();
    fields(message, |number, value| match number {
        1 => put_text(&mut meta, "name", &value),
        2 => put_text(&mut meta, "generateName", &value),
        3 => put_text(&mut meta, "namespace", &value),
        11 => put_entry(&mut meta, "labels", &value, false),
        12 => put_entry(&mut meta, "annotations", &value, false),
        14 => push_text(&mut meta, "finalizers", &value),
        _ => Ok(()),
    })?;
    Ok(Value::Object(meta))
}

/// `v1` `Namespace`: metadata and `spec.finalizers` (its status is the server's).
fn namespace(raw: &[u8]) -> Result<Value, String> {
    let mut object = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {}});
    fields(raw, |number, value| {
        match (number, value) {
            (1, Wire::Bytes(meta)) => object["metadata"] = object_meta(meta)?,
            (2, Wire::Bytes(spec)) => {
                let mut parsed = Map::new();
                fields(spec, |number, value| match number {
                    1 => push_text(&mut parsed, "finalizers", &value),
                    _ => Ok(()),
                })?;
                if !parsed.is_empty() {
                    object["spec"] = Value::Object(parsed);
                }
            }
            _ => {}
        }
        Ok(())
    })?;
    Ok(object)
}

/// `v1` `ConfigMap`: metadata, `data`, `binaryData`, `immutable`.
fn config_map(raw: &[u8]) -> Result<Value, String> {
    let mut object = Map::new();
    object.insert("apiVersion".into(), json!("v1"));
    object.insert("kind".into(), json!("ConfigMap"));
    object.insert("metadata".into(), json!({}));
    fields(raw, |number, value| match (number, value) {
        (1, Wire::Bytes(meta)) => {
            object.insert("metadata".into(), object_meta(meta)?);
            Ok(())
        }
        (2, value) => put_entry(&mut object, "data", &value, false),
        (3, value) => put_entry(&mut object, "binaryData", &value, true),
        (4, Wire::Varint(flag)) => {
            object.insert("immutable".into(), json!(flag != 0));
            Ok(())
        }
        _ => Ok(()),
    })?;
    Ok(Value::Object(object))
}

/// What went wrong reading a protobuf body.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Not an envelope, or not protobuf as written: 400.
    Malformed(String),
    /// A well-formed envelope of a kind this server does not decode: 415.
    Unsupported(String),
}

/// The JSON object a protobuf request body carries.
pub(crate) fn decode(body: &[u8]) -> Result<Value, Refusal> {
    let malformed = |problem: String| {
        Refusal::Malformed(format!(
            "the body of the request could not be decoded as a Kubernetes protobuf object: {problem}"
        ))
    };
    let message = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| malformed("it does not start with the bytes k8s\\0".to_owned()))?;
    let (mut api_version, mut kind, mut raw, mut encoding) =
        (String::new(), String::new(), &[][..], String::new());
    fields(message, |number, value| {
        match (number, value) {
            (1, Wire::Bytes(type_meta)) => fields(type_meta, |number, value| {
                match (number, value) {
                    (1, Wire::Bytes(bytes)) => api_version = text(bytes)?,
                    (2, Wire::Bytes(bytes)) => kind = text(bytes)?,
                    _ => {}
                }
                Ok(())
            })?,
            (2, Wire::Bytes(bytes)) => raw = bytes,
            (3, Wire::Bytes(bytes)) => encoding = text(bytes)?,
            _ => {}
        }
        Ok(())
    })
    .map_err(malformed)?;
    if !encoding.is_empty() {
        return Err(Refusal::Unsupported(format!(
            "protobuf bodies with contentEncoding {encoding:?} are not supported by this test server"
        )));
    }
    match (api_version.as_str(), kind.as_str()) {
        ("v1", "Namespace") => namespace(raw).map_err(malformed),
        ("v1", "ConfigMap") => config_map(raw).map_err(malformed),
        _ => Err(Refusal::Unsupported(format!(
            "this test server decodes protobuf bodies only for v1 Namespace and v1 ConfigMap (kubectl create namespace, kubectl create configmap), not {api_version} {kind}: send it as application/json (kubectl create -f or apply -f)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What kubectl 1.32.4 sends for `kubectl create namespace foo` (logged with `-v=9`).
    const CREATE_NAMESPACE_FOO: &[u8] = &[
        0x6b, 0x38, 0x73, 0x00, 0x0a, 0x0f, 0x0a, 0x02, 0x76, 0x31, 0x12, 0x09, 0x4e, 0x61, 0x6d,
        0x65, 0x73, 0x70, 0x61, 0x63, 0x65, 0x12, 0x1b, 0x0a, 0x13, 0x0a, 0x03, 0x66, 0x6f, 0x6f,
        0x12, 0x00, 0x1a, 0x00, 0x22, 0x00, 0x2a, 0x00, 0x32, 0x00, 0x38, 0x00, 0x42, 0x00, 0x12,
        0x00, 0x1a, 0x02, 0x0a, 0x00, 0x1a, 0x00, 0x22, 0x00,
    ];

    /// What it sends for `kubectl create configmap cm1 --from-literal=k=v --from-literal=a=b`.
    const CREATE_CONFIGMAP_CM1: &[u8] = &[
        0x6b, 0x38, 0x73, 0x00, 0x0a, 0x0f, 0x0a, 0x02, 0x76, 0x31, 0x12, 0x09, 0x43, 0x6f, 0x6e,
        0x66, 0x69, 0x67, 0x4d, 0x61, 0x70, 0x12, 0x25, 0x0a, 0x13, 0x0a, 0x03, 0x63, 0x6d, 0x31,
        0x12, 0x00, 0x1a, 0x00, 0x22, 0x00, 0x2a, 0x00, 0x32, 0x00, 0x38, 0x00, 0x42, 0x00, 0x12,
        0x06, 0x0a, 0x01, 0x61, 0x12, 0x01, 0x62, 0x12, 0x06, 0x0a, 0x01, 0x6b, 0x12, 0x01, 0x76,
        0x1a, 0x00, 0x22, 0x00,
    ];

    #[test]
    fn kubectl_create_namespace_decodes() {
        assert_eq!(
            decode(CREATE_NAMESPACE_FOO).unwrap(),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "foo"}})
        );
    }

    #[test]
    fn kubectl_create_configmap_decodes() {
        assert_eq!(
            decode(CREATE_CONFIGMAP_CM1).unwrap(),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm1"},
                   "data": {"a": "b", "k": "v"}})
        );
    }

    /// A length-delimited field.
    fn field(number: u8, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![number << 3 | 2, u8::try_from(bytes.len()).unwrap()];
        out.extend_from_slice(bytes);
        out
    }

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let type_meta = [field(1, api_version.as_bytes()), field(2, kind.as_bytes())].concat();
        [MAGIC.to_vec(), field(1, &type_meta), field(2, raw)].concat()
    }

    #[test]
    fn labels_annotations_binary_data_and_unknown_fields() {
        let entry = |k: &str, v: &[u8]| [field(1, k.as_bytes()), field(2, v)].concat();
        let meta = [
            field(2, b"gen-"),
            field(11, &entry("app", b"web")),
            field(12, &entry("note", b"hi")),
            // An unknown varint field (99) and a fixed64 one (15).
            vec![0x98, 0x06, 0x2a],
            vec![15 << 3 | 1, 1, 2, 3, 4, 5, 6, 7, 8],
        ]
        .concat();
        let raw = [
            field(1, &meta),
            field(3, &entry("blob", &[0, 255])),
            vec![4 << 3, 1],
        ]
        .concat();
        assert_eq!(
            decode(&envelope("v1", "ConfigMap", &raw)).unwrap(),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"generateName": "gen-", "labels": {"app": "web"},
                                "annotations": {"note": "hi"}},
                   "binaryData": {"blob": "AP8="}, "immutable": true})
        );
    }

    #[test]
    fn other_kinds_and_broken_bodies_are_refused() {
        assert!(matches!(
            decode(&envelope("v1", "Secret", &[])),
            Err(Refusal::Unsupported(message)) if message.contains("not v1 Secret")
        ));
        assert!(matches!(decode(b"{}"), Err(Refusal::Malformed(_))));
        let truncated = &CREATE_NAMESPACE_FOO[..CREATE_NAMESPACE_FOO.len() - 8];
        assert!(matches!(decode(truncated), Err(Refusal::Malformed(_))));
    }
}
