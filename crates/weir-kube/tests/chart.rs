//! The Helm chart (`charts/weir`), the plain manifests (`deploy/`) and the `Dockerfile`, checked
//! without Helm, Docker or a cluster.
//!
//! The chart's templates are rendered here by a small renderer for the part of Helm's template
//! language the chart is allowed to use (see [`gotmpl`]); anything else is refused with the file
//! and the construct, so the chart cannot drift into a feature this test would render wrongly.
//! Every rendered document is read into its k8s-openapi type by kind and written back: a field the
//! type does not know (a typo) or a value of the wrong type fails. Then the facts that matter:
//! the operator's arguments follow the values, the chart's RBAC is deploy/rbac.yaml's, the rules
//! are exactly what the operator's code calls (plus the planned rules, listed), the pods run as
//! non-root, the default values render deploy/ itself, and the chart's CRDs are deploy/crds.yaml.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, Namespace, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use weir_kube::routes::Provider;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(repo().join(relative))
        .unwrap_or_else(|error| panic!("{relative}: {error}"))
}

/// A subset of Go's text/template with Helm's and Sprig's functions, enough for the chart:
///
/// - text and `{{ PIPELINE }}`, with `{{-` / `-}}` trimming the whitespace (spaces, tabs,
///   newlines) before / after the action, as Go does;
/// - `{{ if P }} ... {{ else }} ... {{ end }}` (Go's truth: false, 0, null and empty strings,
///   lists and maps are false) and `{{ range P }} ... {{ end }}` over a list (`.` is the item);
/// - operands `.`, `.A.B`, `$`, `$.A.B`, "strings" (escapes `\"` and `\\` only) and integers;
/// - functions `toYaml X`, `nindent N S`, `quote X`, `default D X`, called directly or at the
///   end of a pipeline (`X | f A` is `f A X`).
///
/// Stricter than Helm where that is cheaper than being exact: a path to a value that is not set
/// is an error (Helm would print nothing), and so is printing null, a list or a map (use
/// toYaml), a number Go would print in exponent form (one million and up), or a string `quote`
/// would escape beyond `\"`, `\\`, `\n`, `\t`.
mod gotmpl {
    use serde_json::{Map, Value};

    #[derive(Debug, Clone)]
    enum Operand {
        /// A path from `.` (false) or from `$` (true).
        Path(bool, Vec<String>),
        Str(String),
        Int(i64),
        Bool(bool),
    }

    #[derive(Debug, Clone)]
    enum Command {
        Operand(Operand),
        Call(String, Vec<Operand>),
    }

    #[derive(Debug, Clone)]
    struct Pipeline {
        commands: Vec<Command>,
        /// `file:line: {{ source }}`, for errors.
        at: String,
    }

    #[derive(Debug)]
    enum Node {
        Text(String),
        Output(Pipeline),
        If(Pipeline, Vec<Node>, Vec<Node>),
        Range(Pipeline, Vec<Node>),
    }

    enum Token {
        Text(String),
        Action { source: String, at: String },
    }

    fn is_space(c: char) -> bool {
        matches!(c, ' ' | '\t' | '\r' | '\n')
    }

    /// Text and actions, with the trim markers applied to the text around them.
    fn lex(file: &str, text: &str) -> Result<Vec<Token>, String> {
        let mut tokens = Vec::new();
        let mut rest = text;
        let mut trim_next = false;
        let mut line = 1;
        while let Some(open) = rest.find("{{") {
            let mut before = rest[..open].to_string();
            line += before.matches('\n').count();
            if trim_next {
                before = before.trim_start_matches(is_space).to_string();
            }
            let after_open = &rest[open + 2..];
            let close = find_close(after_open).ok_or_else(|| {
                format!("{file}:{line}: an action opened with {{{{ is never closed")
            })?;
            let mut inner = &after_open[..close];
            let whole = format!("{{{{{inner}}}}}");
            let at = format!("{file}:{line}: `{whole}`");
            line += inner.matches('\n').count();
            let trim_before = inner.starts_with('-') && inner[1..].starts_with(is_space);
            if trim_before {
                inner = &inner[1..];
                before = before.trim_end_matches(is_space).to_string();
            }
            trim_next = inner.ends_with('-') && inner[..inner.len() - 1].ends_with(is_space);
            if trim_next {
                inner = &inner[..inner.len() - 1];
            }
            if inner.starts_with('-') || inner.ends_with('-') {
                return Err(format!(
                    "{at}: a '-' next to the braces without a space is not a trim marker (outside the supported subset)"
                ));
            }
            tokens.push(Token::Text(before));
            tokens.push(Token::Action {
                source: inner.trim().to_string(),
                at,
            });
            rest = &after_open[close + 2..];
        }
        let mut last = rest.to_string();
        if trim_next {
            last = last.trim_start_matches(is_space).to_string();
        }
        if last.contains("}}") {
            return Err(format!("{file}: a stray }}}} in the text"));
        }
        tokens.push(Token::Text(last));
        Ok(tokens)
    }

    /// Where the action's `}}` is, skipping string literals.
    fn find_close(text: &str) -> Option<usize> {
        let bytes = text.as_bytes();
        let mut in_string = false;
        let mut i = 0;
        while i < bytes.len() {
            match (in_string, bytes[i]) {
                (true, b'\\') => i += 1,
                (true, b'"') | (false, b'"') => in_string = !in_string,
                (false, b'}') if bytes.get(i + 1) == Some(&b'}') => return Some(i),
                _ => {}
            }
            i += 1;
        }
        None
    }

    fn unsupported(at: &str, what: &str) -> String {
        format!("{at}: {what} is outside the template subset the chart may use")
    }

    fn parse_pipeline(source: &str, at: &str) -> Result<Pipeline, String> {
        let mut commands = Vec::new();
        let mut words: Vec<Result<Operand, String>> = Vec::new();
        let chars: Vec<char> = source.chars().collect();
        let mut i = 0;
        let finish = |words: &mut Vec<Result<Operand, String>>,
                      commands: &mut Vec<Command>|
         -> Result<(), String> {
            let mut taken = std::mem::take(words).into_iter();
            let command = match taken.next() {
                None => return Err(format!("{at}: an empty command in the pipeline")),
                Some(Err(function)) => {
                    let mut arguments = Vec::new();
                    for word in taken {
                        match word {
                            Ok(operand) => arguments.push(operand),
                            Err(name) => {
                                return Err(unsupported(
                                    at,
                                    &format!("a function ({name}) as an argument"),
                                ));
                            }
                        }
                    }
                    Command::Call(function, arguments)
                }
                Some(Ok(operand)) => {
                    if taken.next().is_some() {
                        return Err(unsupported(at, "an operand followed by arguments"));
                    }
                    Command::Operand(operand)
                }
            };
            commands.push(command);
            Ok(())
        };
        while i < chars.len() {
            let c = chars[i];
            if is_space(c) {
                i += 1;
                continue;
            }
            if c == '|' {
                finish(&mut words, &mut commands)?;
                i += 1;
            } else if c == '"' {
                let mut value = String::new();
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return Err(format!("{at}: an unterminated string")),
                        Some('"') => break,
                        Some('\\') => match chars.get(i + 1) {
                            Some(escaped @ ('"' | '\\')) => {
                                value.push(*escaped);
                                i += 1;
                            }
                            _ => {
                                return Err(unsupported(
                                    at,
                                    "a string escape other than \\\" and \\\\",
                                ));
                            }
                        },
                        Some(other) => value.push(*other),
                    }
                    i += 1;
                }
                i += 1;
                words.push(Ok(Operand::Str(value)));
            } else if c == '.' || c == '$' {
                let from_root = c == '$';
                if from_root {
                    i += 1;
                    if chars
                        .get(i)
                        .is_some_and(|c| c.is_alphanumeric() || *c == '_')
                    {
                        return Err(unsupported(at, "a variable"));
                    }
                }
                let mut segments = Vec::new();
                while chars.get(i) == Some(&'.') {
                    i += 1;
                    let start = i;
                    while chars
                        .get(i)
                        .is_some_and(|c| c.is_alphanumeric() || *c == '_')
                    {
                        i += 1;
                    }
                    if i > start {
                        segments.push(chars[start..i].iter().collect());
                    } else if !segments.is_empty() || from_root {
                        return Err(format!("{at}: a path ending in '.'"));
                    }
                }
                words.push(Ok(Operand::Path(from_root, segments)));
            } else if c.is_ascii_digit()
                || (c == '-' && chars.get(i + 1).is_some_and(char::is_ascii_digit))
            {
                let start = i;
                i += 1;
                while chars.get(i).is_some_and(char::is_ascii_digit) {
                    i += 1;
                }
                let text: String = chars[start..i].iter().collect();
                let number = text
                    .parse()
                    .map_err(|_| unsupported(at, &format!("the number {text}")))?;
                words.push(Ok(Operand::Int(number)));
            } else if c.is_alphabetic() {
                let start = i;
                while chars
                    .get(i)
                    .is_some_and(|c| c.is_alphanumeric() || *c == '_')
                {
                    i += 1;
                }
                let name: String = chars[start..i].iter().collect();
                if let Some(literal) = match name.as_str() {
                    "true" => Some(true),
                    "false" => Some(false),
                    _ => None,
                } {
                    words.push(Ok(Operand::Bool(literal)));
                    continue;
                }
                if !matches!(name.as_str(), "toYaml" | "nindent" | "quote" | "default") {
                    return Err(unsupported(
                        at,
                        &format!("the function or keyword {name:?}"),
                    ));
                }
                words.push(Err(name));
            } else {
                return Err(unsupported(at, &format!("the character {c:?}")));
            }
            if let Some(Ok(_)) = words.last()
                && chars.get(i).is_some_and(|c| !is_space(*c) && *c != '|')
            {
                return Err(unsupported(
                    at,
                    &format!("{:?} right after an operand", chars[i]),
                ));
            }
        }
        finish(&mut words, &mut commands)?;
        for (index, command) in commands.iter().enumerate() {
            if index > 0 && matches!(command, Command::Operand(_)) {
                return Err(format!("{at}: only a function can follow '|'"));
            }
        }
        Ok(Pipeline {
            commands,
            at: at.to_string(),
        })
    }

    /// The template's tree, or the first construct outside the subset.
    fn parse(file: &str, text: &str) -> Result<Vec<Node>, String> {
        // Each open block: its kind ("if"/"range"), its pipeline, its nodes, and for `if` the
        // nodes before `else` once `else` was seen.
        struct Open {
            keyword: &'static str,
            pipeline: Pipeline,
            nodes: Vec<Node>,
            then: Option<Vec<Node>>,
        }
        let mut stack: Vec<Open> = Vec::new();
        let mut top: Vec<Node> = Vec::new();
        for token in lex(file, text)? {
            let (source, at) = match token {
                Token::Text(text) => {
                    if !text.is_empty() {
                        stack
                            .last_mut()
                            .map_or(&mut top, |open| &mut open.nodes)
                            .push(Node::Text(text));
                    }
                    continue;
                }
                Token::Action { source, at } => (source, at),
            };
            let (keyword, rest) = source
                .split_once(is_space)
                .map_or((source.as_str(), ""), |(keyword, rest)| {
                    (keyword, rest.trim())
                });
            let node = match keyword {
                "if" | "range" => {
                    stack.push(Open {
                        keyword: if keyword == "if" { "if" } else { "range" },
                        pipeline: parse_pipeline(rest, &at)?,
                        nodes: Vec::new(),
                        then: None,
                    });
                    continue;
                }
                "else" => {
                    if !rest.is_empty() {
                        return Err(unsupported(&at, "`else` with a condition"));
                    }
                    match stack.last_mut() {
                        Some(open) if open.keyword == "if" && open.then.is_none() => {
                            open.then = Some(std::mem::take(&mut open.nodes));
                        }
                        Some(open) if open.keyword == "range" => {
                            return Err(unsupported(&at, "`else` in a range"));
                        }
                        _ => return Err(format!("{at}: an `else` outside an if")),
                    }
                    continue;
                }
                "end" => {
                    if !rest.is_empty() {
                        return Err(format!("{at}: `end` takes nothing"));
                    }
                    let open = stack
                        .pop()
                        .ok_or_else(|| format!("{at}: an `end` with nothing open"))?;
                    match open.then {
                        Some(then) => Node::If(open.pipeline, then, open.nodes),
                        None if open.keyword == "if" => {
                            Node::If(open.pipeline, open.nodes, Vec::new())
                        }
                        None => Node::Range(open.pipeline, open.nodes),
                    }
                }
                _ if source.starts_with("/*") => return Err(unsupported(&at, "a comment")),
                "with" | "define" | "template" | "block" | "include" | "break" | "continue"
                | "tpl" | "printf" | "required" => {
                    return Err(unsupported(&at, &format!("`{keyword}`")));
                }
                _ => Node::Output(parse_pipeline(&source, &at)?),
            };
            stack
                .last_mut()
                .map_or(&mut top, |open| &mut open.nodes)
                .push(node);
        }
        if let Some(open) = stack.last() {
            return Err(format!(
                "{}: this `{}` has no `end`",
                open.pipeline.at, open.keyword
            ));
        }
        Ok(top)
    }

    /// Go's truth of a value.
    pub fn truthy(value: &Value) -> bool {
        match value {
            Value::Null => false,
            Value::Bool(b) => *b,
            Value::Number(n) => n.as_f64().is_some_and(|n| n != 0.0),
            Value::String(s) => !s.is_empty(),
            Value::Array(a) => !a.is_empty(),
            Value::Object(o) => !o.is_empty(),
        }
    }

    /// A value as `{{ X }}` prints it.
    fn print(value: &Value, at: &str) -> Result<String, String> {
        match value {
            Value::String(s) => Ok(s.clone()),
            Value::Bool(b) => Ok(b.to_string()),
            // Helm reads numbers as float64, which Go prints as 1e+06 from a million on.
            Value::Number(n) => match n.as_i64() {
                Some(i) if i.abs() < 1_000_000 => Ok(i.to_string()),
                _ => Err(format!(
                    "{at}: the number {n} would not print as written; quote it"
                )),
            },
            Value::Null => Err(format!("{at}: prints a null value")),
            Value::Array(_) | Value::Object(_) => {
                Err(format!("{at}: prints a list or a map; use toYaml"))
            }
        }
    }

    /// Sprig's `quote`: Go's %q of the printed value.
    fn quote(value: &Value, at: &str) -> Result<String, String> {
        let text = print(value, at)?;
        let mut quoted = String::from("\"");
        for c in text.chars() {
            match c {
                '"' => quoted.push_str("\\\""),
                '\\' => quoted.push_str("\\\\"),
                '\n' => quoted.push_str("\\n"),
                '\t' => quoted.push_str("\\t"),
                ' '..='~' => quoted.push(c),
                _ => {
                    return Err(format!(
                        "{at}: quote of {c:?}, which Go may escape differently"
                    ));
                }
            }
        }
        quoted.push('"');
        Ok(quoted)
    }

    /// A string as a YAML scalar: plain when it cannot be read as anything but this string.
    fn scalar_string(s: &str) -> String {
        let plain = !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | '-'))
            && s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '/')
            && !matches!(
                s.to_ascii_lowercase().as_str(),
                "true" | "false" | "yes" | "no" | "on" | "off" | "y" | "n" | "null"
            );
        if plain {
            s.to_string()
        } else {
            // A JSON string is a YAML double-quoted scalar.
            serde_json::to_string(s).unwrap_or_default()
        }
    }

    fn yaml_lines(value: &Value) -> Vec<String> {
        let inline = |value: &Value| -> Option<String> {
            match value {
                Value::Null => Some("null".into()),
                Value::Bool(b) => Some(b.to_string()),
                Value::Number(n) => Some(n.to_string()),
                Value::String(s) => Some(scalar_string(s)),
                Value::Array(a) if a.is_empty() => Some("[]".into()),
                Value::Object(o) if o.is_empty() => Some("{}".into()),
                _ => None,
            }
        };
        if let Some(line) = inline(value) {
            return vec![line];
        }
        let mut lines = Vec::new();
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                for key in keys {
                    let item = &map[key.as_str()];
                    let key = scalar_string(key);
                    match (inline(item), item) {
                        (Some(line), _) => lines.push(format!("{key}: {line}")),
                        // Sequences sit at their key's indentation, as Helm's toYaml writes them.
                        (None, Value::Array(_)) => {
                            lines.push(format!("{key}:"));
                            lines.extend(yaml_lines(item));
                        }
                        (None, _) => {
                            lines.push(format!("{key}:"));
                            lines.extend(yaml_lines(item).into_iter().map(|l| format!("  {l}")));
                        }
                    }
                }
            }
            Value::Array(items) => {
                for item in items {
                    for (index, line) in yaml_lines(item).into_iter().enumerate() {
                        lines.push(if index == 0 {
                            format!("- {line}")
                        } else {
                            format!("  {line}")
                        });
                    }
                }
            }
            _ => {}
        }
        lines
    }

    /// Helm's `toYaml`: block YAML, keys sorted, without the final newline.
    pub fn to_yaml(value: &Value) -> String {
        yaml_lines(value).join("\n")
    }

    fn resolve(operand: &Operand, root: &Value, dot: &Value, at: &str) -> Result<Value, String> {
        match operand {
            Operand::Str(s) => Ok(Value::String(s.clone())),
            Operand::Int(i) => Ok(Value::from(*i)),
            Operand::Bool(b) => Ok(Value::Bool(*b)),
            Operand::Path(from_root, segments) => {
                let mut value = if *from_root { root } else { dot };
                for (index, segment) in segments.iter().enumerate() {
                    let path = segments[..=index].join(".");
                    value = match value {
                        Value::Object(map) => map.get(segment).ok_or_else(|| {
                            format!("{at}: .{path} is not set (declare every value in values.yaml)")
                        })?,
                        _ => {
                            return Err(format!(
                                "{at}: .{path}: not a map (inside a range, use $.)"
                            ));
                        }
                    };
                }
                Ok(value.clone())
            }
        }
    }

    fn evaluate(pipeline: &Pipeline, root: &Value, dot: &Value) -> Result<Value, String> {
        let at = pipeline.at.as_str();
        let mut piped: Option<Value> = None;
        for command in &pipeline.commands {
            piped = Some(match command {
                Command::Operand(operand) => resolve(operand, root, dot, at)?,
                Command::Call(function, operands) => {
                    let mut arguments = operands
                        .iter()
                        .map(|operand| resolve(operand, root, dot, at))
                        .collect::<Result<Vec<_>, _>>()?;
                    arguments.extend(piped.take());
                    call(function, &arguments, at)?
                }
            });
        }
        piped.ok_or_else(|| format!("{at}: an empty action"))
    }

    fn call(function: &str, arguments: &[Value], at: &str) -> Result<Value, String> {
        let arity = |n: usize| {
            if arguments.len() == n {
                Ok(())
            } else {
                Err(format!(
                    "{at}: {function} takes {n} argument(s), given {}",
                    arguments.len()
                ))
            }
        };
        match function {
            "toYaml" => {
                arity(1)?;
                Ok(Value::String(to_yaml(&arguments[0])))
            }
            "nindent" => {
                arity(2)?;
                let width = arguments[0]
                    .as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| format!("{at}: nindent's first argument is a width"))?;
                let pad = " ".repeat(width);
                let text = print(&arguments[1], at)?;
                Ok(Value::String(format!(
                    "\n{pad}{}",
                    text.replace('\n', &format!("\n{pad}"))
                )))
            }
            "quote" => {
                arity(1)?;
                Ok(Value::String(quote(&arguments[0], at)?))
            }
            "default" => {
                arity(2)?;
                Ok(if truthy(&arguments[1]) {
                    arguments[1].clone()
                } else {
                    arguments[0].clone()
                })
            }
            other => Err(unsupported(at, &format!("the function {other}"))),
        }
    }

    fn walk(nodes: &[Node], root: &Value, dot: &Value, out: &mut String) -> Result<(), String> {
        for node in nodes {
            match node {
                Node::Text(text) => out.push_str(text),
                Node::Output(pipeline) => {
                    out.push_str(&print(&evaluate(pipeline, root, dot)?, &pipeline.at)?);
                }
                Node::If(pipeline, then, otherwise) => {
                    let branch = if truthy(&evaluate(pipeline, root, dot)?) {
                        then
                    } else {
                        otherwise
                    };
                    walk(branch, root, dot, out)?;
                }
                Node::Range(pipeline, body) => match evaluate(pipeline, root, dot)? {
                    Value::Null => {}
                    Value::Array(items) => {
                        for item in &items {
                            walk(body, root, item, out)?;
                        }
                    }
                    _ => {
                        return Err(format!(
                            "{}: range over something that is not a list",
                            pipeline.at
                        ));
                    }
                },
            }
        }
        Ok(())
    }

    /// `text` (the template `file`) rendered with `root` as `.`.
    pub fn render(file: &str, text: &str, root: &Value) -> Result<String, String> {
        let tree = parse(file, text)?;
        let mut out = String::new();
        walk(&tree, root, root, &mut out)?;
        Ok(out)
    }

    /// `overrides` merged into `base` as Helm merges a values file: maps key by key, anything
    /// else replaced.
    pub fn merge(base: &mut Value, overrides: &Value) {
        match (base, overrides) {
            (Value::Object(base), Value::Object(overrides)) => {
                for (key, value) in overrides {
                    merge(
                        base.entry(key.clone()).or_insert(Value::Object(Map::new())),
                        value,
                    );
                }
            }
            (base, overrides) => *base = overrides.clone(),
        }
    }
}

/// A Kubernetes object read into its type, by kind. Reading it is the check: some are never
/// looked at again. A handful per test: their sizes do not matter.
#[allow(dead_code, clippy::large_enum_variant)]
#[derive(Debug, Clone)]
enum Object {
    Namespace(Namespace),
    ServiceAccount(ServiceAccount),
    ClusterRole(ClusterRole),
    ClusterRoleBinding(ClusterRoleBinding),
    Role(Role),
    RoleBinding(RoleBinding),
    Deployment(Box<Deployment>),
    Service(Service),
}

/// One document of a manifest: where it came from, as written, and typed.
#[derive(Debug, Clone)]
struct Document {
    file: String,
    value: Value,
    object: Object,
}

impl Document {
    fn id(&self) -> String {
        format!(
            "{} {}/{}",
            self.value["kind"].as_str().unwrap_or_default(),
            self.value["metadata"]["namespace"].as_str().unwrap_or("-"),
            self.value["metadata"]["name"].as_str().unwrap_or_default()
        )
    }
}

/// The first place where `written` and `read_back` differ.
fn first_difference(path: &str, written: &Value, read_back: &Value) -> Option<String> {
    match (written, read_back) {
        (Value::Object(a), Value::Object(b)) => a.keys().chain(b.keys()).find_map(|key| {
            let (x, y) = (
                a.get(key).unwrap_or(&Value::Null),
                b.get(key).unwrap_or(&Value::Null),
            );
            first_difference(&format!("{path}.{key}"), x, y)
        }),
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(i, (x, y))| first_difference(&format!("{path}[{i}]"), x, y)),
        _ if written == read_back => None,
        _ => Some(format!("{path}: written {written}, read as {read_back}")),
    }
}

/// `value` as a `T`, refused when reading it into `T` loses or changes anything.
fn strictly<T: DeserializeOwned + Serialize>(file: &str, value: &Value) -> Result<T, String> {
    let typed: T =
        serde_json::from_value(value.clone()).map_err(|error| format!("{file}: {error}"))?;
    let read_back = serde_json::to_value(&typed).map_err(|error| format!("{file}: {error}"))?;
    match first_difference("", value, &read_back) {
        None => Ok(typed),
        Some(difference) => Err(format!(
            "{file}: {} {}: a field its type does not have, or of another type: {difference}",
            value["kind"], value["metadata"]["name"]
        )),
    }
}

/// Every document of a manifest, typed by kind; an unknown kind is an error.
fn parse_manifest(file: &str, text: &str) -> Result<Vec<Document>, String> {
    let values: Vec<Value> =
        serde_saphyr::from_multiple(text).map_err(|error| format!("{file}: not YAML: {error}"))?;
    let mut documents = Vec::new();
    for value in values.into_iter().filter(|value| !value.is_null()) {
        let object = match value["kind"].as_str().unwrap_or_default() {
            "Namespace" => Object::Namespace(strictly(file, &value)?),
            "ServiceAccount" => Object::ServiceAccount(strictly(file, &value)?),
            "ClusterRole" => Object::ClusterRole(strictly(file, &value)?),
            "ClusterRoleBinding" => Object::ClusterRoleBinding(strictly(file, &value)?),
            "Role" => Object::Role(strictly(file, &value)?),
            "RoleBinding" => Object::RoleBinding(strictly(file, &value)?),
            "Deployment" => Object::Deployment(Box::new(strictly(file, &value)?)),
            "Service" => Object::Service(strictly(file, &value)?),
            other => {
                return Err(format!(
                    "{file}: kind {other:?} is not one weir's manifests hold"
                ));
            }
        };
        documents.push(Document {
            file: file.to_string(),
            value,
            object,
        });
    }
    Ok(documents)
}

fn deploy(file: &str) -> Vec<Document> {
    parse_manifest(file, &read(file)).unwrap_or_else(|error| panic!("{error}"))
}

/// A release of the chart: its name, namespace and values beyond the defaults.
struct Release {
    name: &'static str,
    namespace: &'static str,
    values: &'static str,
}

/// The defaults, as `helm install weir charts/weir -n weir-system` would have them.
const DEFAULT: Release = Release {
    name: "weir",
    namespace: "weir-system",
    values: "{}",
};

/// Two namespaces, no leader election (and so one replica), a Prometheus.
const SCOPED: Release = Release {
    name: "delivery",
    namespace: "delivery-system",
    values: "leaderElection: false\nnamespaces: [team-a, team-b]\nprometheus: http://prometheus.monitoring:9090\nreplicas: 3\n",
};

/// Three replicas, another image tag and other resources.
const WIDE: Release = Release {
    name: "weir",
    namespace: "ops",
    values: "replicas: 3\nimage: {tag: 0.2.0-rc.1, pullPolicy: Always}\nresources: {requests: {cpu: \"1\", memory: 1Gi}, limits: {memory: 2Gi}}\n",
};

const RELEASES: [&Release; 3] = [&DEFAULT, &SCOPED, &WIDE];

fn chart_values(release: &Release) -> Value {
    let mut values: Value = serde_saphyr::from_str(&read("charts/weir/values.yaml")).unwrap();
    let overrides: Value = serde_saphyr::from_str(release.values).unwrap();
    gotmpl::merge(&mut values, &overrides);
    values
}

/// Every template of the chart rendered for `release` and parsed.
fn render_chart(release: &Release) -> Vec<Document> {
    let chart: Value = serde_saphyr::from_str(&read("charts/weir/Chart.yaml")).unwrap();
    let root = json!({
        "Values": chart_values(release),
        "Release": {"Name": release.name, "Namespace": release.namespace},
        "Chart": {"Name": chart["name"], "Version": chart["version"], "AppVersion": chart["appVersion"]},
    });
    let dir = repo().join("charts/weir/templates");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 5, "templates missing in {}", dir.display());
    let mut documents = Vec::new();
    for path in files {
        let file = format!(
            "charts/weir/templates/{}",
            path.file_name().unwrap().to_string_lossy()
        );
        assert!(
            file.ends_with(".yaml"),
            "{file}: only .yaml templates are rendered here (no partials, no NOTES.txt)"
        );
        let text = std::fs::read_to_string(&path).unwrap();
        let rendered =
            gotmpl::render(&file, &text, &root).unwrap_or_else(|error| panic!("{error}"));
        let parsed = parse_manifest(&file, &rendered)
            .unwrap_or_else(|error| panic!("{error}\nrendered for {}:\n{rendered}", release.name));
        documents.extend(parsed);
    }
    documents
}

fn the_deployment(documents: &[Document]) -> (&Document, &Deployment) {
    let deployments: Vec<_> = documents
        .iter()
        .filter_map(|document| match &document.object {
            Object::Deployment(deployment) => Some((document, deployment.as_ref())),
            _ => None,
        })
        .collect();
    assert_eq!(
        deployments.len(),
        1,
        "one Deployment, found {}",
        deployments.len()
    );
    deployments[0]
}

fn container(deployment: &Deployment) -> &Container {
    let containers = &deployment.spec.template.spec.as_ref().unwrap().containers;
    assert_eq!(containers.len(), 1);
    &containers[0]
}

fn args(deployment: &Deployment) -> Vec<String> {
    container(deployment).args.clone().unwrap_or_default()
}

/// The values following each `flag` in `args` (`--flag VALUE` or `--flag=VALUE`).
fn flag_values(args: &[String], flag: &str) -> Vec<String> {
    let mut values = Vec::new();
    for (index, arg) in args.iter().enumerate() {
        if arg == flag {
            values.push(args.get(index + 1).cloned().unwrap_or_default());
        } else if let Some(value) = arg.strip_prefix(&format!("{flag}=")) {
            values.push(value.to_string());
        }
    }
    values
}

type Grant = (String, String, String);

fn grants(rules: &[PolicyRule]) -> BTreeSet<Grant> {
    let mut grants = BTreeSet::new();
    for rule in rules {
        assert!(rule.resource_names.is_none() && rule.non_resource_urls.is_none());
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    assert_ne!(verb, "*", "no wildcard verbs");
                    assert_ne!(resource, "*", "no wildcard resources");
                    grants.insert((group.clone(), resource.clone(), verb.clone()));
                }
            }
        }
    }
    grants
}

/// The operator's rights: the ClusterRole's, or those of the Role in each watched namespace;
/// and the Roles in the operator's own namespace (the Lease), by name.
struct Rights {
    cluster: Option<BTreeSet<Grant>>,
    per_namespace: BTreeMap<String, BTreeSet<Grant>>,
    own: BTreeMap<String, BTreeSet<Grant>>,
}

fn rights(documents: &[Document], own_namespace: &str) -> Rights {
    let mut rights = Rights {
        cluster: None,
        per_namespace: BTreeMap::new(),
        own: BTreeMap::new(),
    };
    for document in documents {
        match &document.object {
            Object::ClusterRole(role) => {
                assert!(
                    rights.cluster.is_none(),
                    "{}: a second ClusterRole",
                    document.file
                );
                rights.cluster = Some(grants(role.rules.as_deref().unwrap_or_default()));
            }
            Object::Role(role) => {
                let namespace = role.metadata.namespace.clone().unwrap();
                let rules = grants(role.rules.as_deref().unwrap_or_default());
                if namespace == own_namespace
                    && role
                        .metadata
                        .name
                        .as_deref()
                        .unwrap()
                        .ends_with("-leader-election")
                {
                    rights
                        .own
                        .insert(role.metadata.name.clone().unwrap(), rules);
                } else {
                    rights.per_namespace.insert(namespace, rules);
                }
            }
            _ => {}
        }
    }
    rights
}

/// What each (Cluster)RoleBinding binds: role kind, role name, namespace ("" for cluster), and
/// its subjects as (kind, name, namespace).
type Binding = (String, String, String, Vec<(String, String, String)>);

fn bindings(documents: &[Document]) -> Vec<Binding> {
    let subjects = |subjects: &Option<Vec<k8s_openapi::api::rbac::v1::Subject>>| {
        subjects
            .iter()
            .flatten()
            .map(|s| {
                (
                    s.kind.clone(),
                    s.name.clone(),
                    s.namespace.clone().unwrap_or_default(),
                )
            })
            .collect::<Vec<_>>()
    };
    documents
        .iter()
        .filter_map(|document| match &document.object {
            Object::ClusterRoleBinding(b) => Some((
                b.role_ref.kind.clone(),
                b.role_ref.name.clone(),
                String::new(),
                subjects(&b.subjects),
            )),
            Object::RoleBinding(b) => Some((
                b.role_ref.kind.clone(),
                b.role_ref.name.clone(),
                b.metadata.namespace.clone().unwrap_or_default(),
                subjects(&b.subjects),
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn every_template_renders_into_known_kinds_with_each_set_of_values() {
    for release in RELEASES {
        let documents = render_chart(release);
        let kinds: BTreeSet<&str> = documents
            .iter()
            .map(|document| document.value["kind"].as_str().unwrap())
            .collect();
        for kind in ["ServiceAccount", "Deployment", "Service"] {
            assert!(kinds.contains(kind), "{}: no {kind} rendered", release.name);
        }
        for document in &documents {
            if !matches!(
                document.object,
                Object::ClusterRole(_) | Object::ClusterRoleBinding(_)
            ) {
                assert!(
                    document.value["metadata"]["namespace"].as_str().is_some(),
                    "{}: {} has no namespace",
                    document.file,
                    document.id()
                );
            }
        }
    }
    // deploy/ is read the same way.
    assert_eq!(deploy("deploy/rbac.yaml").len(), 5);
    assert_eq!(deploy("deploy/operator.yaml").len(), 3);
}

#[test]
fn the_default_values_render_exactly_deploy() {
    let rendered: BTreeMap<String, Value> = render_chart(&DEFAULT)
        .into_iter()
        .map(|document| (document.id(), document.value))
        .collect();
    let mut plain: BTreeMap<String, Value> = BTreeMap::new();
    for document in deploy("deploy/rbac.yaml")
        .into_iter()
        .chain(deploy("deploy/operator.yaml"))
    {
        // The chart leaves the namespace to `helm install --create-namespace`.
        if !matches!(document.object, Object::Namespace(_)) {
            plain.insert(document.id(), document.value);
        }
    }
    assert_eq!(
        rendered.keys().collect::<Vec<_>>(),
        plain.keys().collect::<Vec<_>>(),
        "the chart with its defaults and deploy/ hold other objects"
    );
    for (id, value) in &plain {
        if let Some(difference) = first_difference("", value, &rendered[id]) {
            panic!("{id}: deploy/ and the chart's default rendering differ at {difference}");
        }
    }
}

#[test]
fn the_operators_arguments_and_replicas_follow_the_values() {
    for release in RELEASES {
        let values = chart_values(release);
        let documents = render_chart(release);
        let (document, deployment) = the_deployment(&documents);
        let args = args(deployment);
        let context = format!("{} ({}): args {args:?}", release.name, document.file);
        assert_eq!(
            args.first().map(String::as_str),
            Some("operator"),
            "{context}"
        );
        let leader_election = values["leaderElection"].as_bool().unwrap();
        assert_eq!(
            args.iter().any(|arg| arg == "--leader-election"),
            leader_election,
            "{context}"
        );
        let namespaces: Vec<String> = values["namespaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|namespace| namespace.as_str().unwrap().to_string())
            .collect();
        assert_eq!(flag_values(&args, "--namespace"), namespaces, "{context}");
        let prometheus = values["prometheus"].as_str().unwrap();
        let expected: Vec<&str> = if prometheus.is_empty() {
            vec![]
        } else {
            vec![prometheus]
        };
        assert_eq!(flag_values(&args, "--prometheus"), expected, "{context}");
        // The API listens beyond the pod's loopback, on the port the probes and Service use.
        let listen = flag_values(&args, "--listen");
        assert_eq!(listen.len(), 1, "{context}");
        assert!(listen[0].starts_with("0.0.0.0:"), "{context}");
        let port: i32 = listen[0].rsplit(':').next().unwrap().parse().unwrap();
        let ports = container(deployment).ports.clone().unwrap();
        assert_eq!(
            (ports[0].name.as_deref(), ports[0].container_port),
            (Some("http"), port)
        );

        let spec = &deployment.spec;
        if leader_election {
            assert_eq!(
                spec.replicas,
                values["replicas"].as_i64().map(|n| n as i32),
                "{context}"
            );
        } else {
            // Without an election, never two operators: one replica, replaced, not rolled.
            assert_eq!(spec.replicas, Some(1), "{context}");
            let strategy = spec.strategy.as_ref().and_then(|s| s.type_.as_deref());
            assert_eq!(strategy, Some("Recreate"), "{context}");
        }
        let tag = values["image"]["tag"].as_str().unwrap();
        let chart: Value = serde_saphyr::from_str(&read("charts/weir/Chart.yaml")).unwrap();
        let tag = if tag.is_empty() {
            chart["appVersion"].as_str().unwrap()
        } else {
            tag
        };
        assert_eq!(
            container(deployment).image.as_deref(),
            Some(format!("{}:{tag}", values["image"]["repository"].as_str().unwrap()).as_str())
        );
        assert_eq!(
            serde_json::to_value(&container(deployment).resources).unwrap(),
            values["resources"],
            "{context}"
        );
        // The Service reaches the pods on that port.
        let service = documents
            .iter()
            .find_map(|document| match &document.object {
                Object::Service(service) => Some(service),
                _ => None,
            })
            .unwrap();
        let service_spec = service.spec.as_ref().unwrap();
        assert_eq!(
            service_spec.selector.as_ref(),
            spec.template.metadata.as_ref().unwrap().labels.as_ref()
        );
        assert_eq!(
            spec.selector.match_labels.as_ref(),
            spec.template.metadata.as_ref().unwrap().labels.as_ref()
        );
        let service_port = &service_spec.ports.as_ref().unwrap()[0];
        assert_eq!(service_port.port, port);
        assert_eq!(
            service_port.target_port,
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("http".into()))
        );
    }
}

/// The `--flags` of `weir operator`, from the clap attributes of its source files.
fn declared_operator_flags() -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    for file in [
        "crates/weir/src/cmd_operator.rs",
        "crates/weir/src/cmd_operator/leading.rs",
        "crates/weir/src/integrations.rs",
    ] {
        let source = read(file);
        let lines: Vec<&str> = source.lines().collect();
        for (index, line) in lines.iter().enumerate() {
            let line = line.trim();
            if !(line.starts_with("#[arg(") && line.contains("long")) {
                continue;
            }
            if let Some(rest) = line.split("long = \"").nth(1) {
                flags.insert(format!("--{}", rest.split('"').next().unwrap()));
                continue;
            }
            // `long` alone: the field's name, on the next line that is not an attribute.
            let field = lines[index + 1..]
                .iter()
                .map(|line| line.trim())
                .find(|line| !line.starts_with("#[") && !line.starts_with("//"))
                .unwrap();
            let name = field.trim_start_matches("pub ").split(':').next().unwrap();
            flags.insert(format!("--{}", name.replace('_', "-")));
        }
    }
    flags
}

#[test]
fn the_manifests_pass_only_flags_the_operator_declares() {
    let declared = declared_operator_flags();
    for flag in [
        "--namespace",
        "--listen",
        "--prometheus",
        "--leader-election",
    ] {
        assert!(
            declared.contains(flag),
            "{flag} not found among {declared:?}"
        );
    }
    let mut deployments: Vec<(String, Vec<String>)> = RELEASES
        .iter()
        .map(|release| {
            let documents = render_chart(release);
            let (document, deployment) = the_deployment(&documents);
            (
                format!("{} ({})", document.file, release.name),
                args(deployment),
            )
        })
        .collect();
    let operator = deploy("deploy/operator.yaml");
    let (document, deployment) = the_deployment(&operator);
    deployments.push((document.file.clone(), args(deployment)));
    for (source, args) in deployments {
        for arg in args.iter().filter(|arg| arg.starts_with("--")) {
            let flag = arg.split('=').next().unwrap();
            assert!(
                declared.contains(flag),
                "{source}: {flag} is not a flag of weir operator ({declared:?})"
            );
        }
    }
    // The probes' paths are ones weir's API serves.
    let api = read("crates/weir-api/src/lib.rs");
    assert!(api.contains(".route(\"/healthz\""));
    assert!(api.contains(".route(\"/readyz\""));
}

/// What the operator does in a cluster, (group, resource, verb), from its code: the watch and
/// status writes in crates/weir-kube/src/controller/, the workload calls in
/// crates/weir-kube/src/target.rs. Server-side apply that may create an object needs `create`
/// besides `patch`. The traffic providers' objects are added from `routes::objects`.
const USED: &[(&str, &str, &[&str])] = &[
    // The watch, the KubeStore's reads and `weir delete`; the Rollout made from a Canary is
    // applied (create, patch); finalizers are merge-patched.
    (
        "weir.dev",
        "rollouts",
        &["get", "list", "watch", "create", "patch", "delete"],
    ),
    // A commit updates the status; a refusal is merge-patched.
    ("weir.dev", "rollouts/status", &["update", "patch"]),
    // The owner references weir writes block their owner's deletion.
    ("weir.dev", "rollouts/finalizers", &["update"]),
    ("flagger.app", "canaries", &["get", "list", "watch"]),
    ("flagger.app", "canaries/status", &["patch"]),
    ("flagger.app", "canaries/finalizers", &["update"]),
    ("flagger.app", "metrictemplates", &["get", "list", "watch"]),
    ("flagger.app", "alertproviders", &["get", "list", "watch"]),
    // MetricTemplates of type keptn.
    ("metrics.keptn.sh", "keptnmetrics", &["get"]),
    ("metrics.keptn.sh", "analyses", &["get", "create", "delete"]),
    // Mode revisions lists a component's Deployments (and its Services when reverting).
    (
        "apps",
        "deployments",
        &["get", "list", "create", "patch", "delete"],
    ),
    // A DaemonSet target (its node selector scales it), its NAME-primary copy.
    ("apps", "daemonsets", &["get", "create", "patch", "delete"]),
    (
        "",
        "services",
        &["get", "list", "create", "patch", "delete"],
    ),
    (
        "autoscaling",
        "horizontalpodautoscalers",
        &["get", "create", "patch", "delete"],
    ),
    ("", "configmaps", &["get", "create", "patch", "delete"]),
    // A target's Secrets copied as NAME-primary; those MetricTemplates and AlertProviders name
    // (secretRef) watched, each selected by its name.
    (
        "",
        "secrets",
        &["get", "list", "watch", "create", "patch", "delete"],
    ),
    ("", "events", &["create"]),
    // spec.target.statusTo onto an OAM Application.
    ("core.oam.dev", "applications", &["get", "patch"]),
    ("core.oam.dev", "applications/status", &["patch"]),
    // Argo Rollouts' objects (argo_rollouts.rs, argo_analysis.rs, argo_traffic.rs).
    ("argoproj.io", "rollouts", &["list", "watch", "patch"]),
    ("argoproj.io", "rollouts/status", &["patch"]),
    ("argoproj.io", "rollouts/finalizers", &["update"]),
    ("argoproj.io", "analysisruns/finalizers", &["update"]),
    ("argoproj.io", "experiments/finalizers", &["update"]),
    // Experiments (argo_experiments.rs), created by a Rollout's experiment step and terminated
    // when it leaves the step (argo_rollouts.rs); their ReplicaSets, Services and runs are above.
    (
        "argoproj.io",
        "experiments",
        &["list", "watch", "create", "patch"],
    ),
    ("argoproj.io", "experiments/status", &["patch"]),
    (
        "argoproj.io",
        "analysisruns",
        &["list", "watch", "create", "patch", "delete"],
    ),
    ("argoproj.io", "analysisruns/status", &["patch"]),
    ("argoproj.io", "analysistemplates", &["get"]),
    ("argoproj.io", "clusteranalysistemplates", &["get"]),
    (
        "apps",
        "replicasets",
        &["list", "create", "patch", "delete"],
    ),
    ("batch", "jobs", &["get", "create", "delete"]),
    ("gateway.networking.k8s.io", "grpcroutes", &["get", "patch"]),
    ("gateway.networking.k8s.io", "tcproutes", &["get", "patch"]),
    ("gateway.networking.k8s.io", "tlsroutes", &["get", "patch"]),
    ("traefik.containo.us", "traefikservices", &["get", "patch"]),
    // `restart`: old pods evicted.
    ("", "pods", &["list"]),
    ("", "pods/eviction", &["create"]),
];

fn expand(table: &[(&str, &str, &[&str])]) -> BTreeSet<Grant> {
    table
        .iter()
        .flat_map(|(group, resource, verbs)| {
            verbs
                .iter()
                .map(|verb| (group.to_string(), resource.to_string(), verb.to_string()))
        })
        .collect()
}

/// What the traffic providers touch: (group, plural, verb) from every provider's router
/// ([`routes::Router::access`]: the objects it owns - read back, applied, deleted - and the
/// user's objects it edits), checked against the objects it writes in src/routes/table.rs.
fn route_resources() -> BTreeSet<Grant> {
    let mut resources = BTreeSet::new();
    for provider in Provider::all() {
        for access in provider.router().access() {
            for verb in access.verbs {
                resources.insert((
                    access.group.to_string(),
                    access.resource.to_string(),
                    verb.to_string(),
                ));
            }
        }
    }
    assert!(resources.len() >= 4, "{resources:?}");
    resources
}

#[test]
fn deploy_rbac_grants_exactly_what_the_operator_uses() {
    let documents = deploy("deploy/rbac.yaml");
    let rights = rights(&documents, "weir-system");
    let granted = rights.cluster.expect("a ClusterRole in deploy/rbac.yaml");
    let mut wanted = expand(USED);
    // `get` on owned route objects: mode managed reads them back to find changes made by hand;
    // on the user's (an Ingress, an ApisixRoute, an Upstream): the providers work from them.
    wanted.extend(route_resources());
    let missing: Vec<_> = wanted.difference(&granted).collect();
    assert!(
        missing.is_empty(),
        "deploy/rbac.yaml does not grant what the operator does: {missing:?}"
    );
    let extra: Vec<_> = granted.difference(&wanted).collect();
    assert!(
        extra.is_empty(),
        "deploy/rbac.yaml grants more than the operator uses: {extra:?}"
    );
    // The Lease, in the operator's namespace only.
    let lease: BTreeSet<Grant> = expand(&[(
        "coordination.k8s.io",
        "leases",
        &["get", "create", "update"],
    )]);
    assert_eq!(rights.own.values().collect::<Vec<_>>(), vec![&lease]);
    assert!(rights.per_namespace.is_empty());
}

#[test]
fn the_charts_rbac_is_deploys_for_every_set_of_values() {
    let plain = rights(&deploy("deploy/rbac.yaml"), "weir-system");
    let operator_rules = plain.cluster.clone().unwrap();
    let lease_rules = plain.own.values().next().unwrap().clone();
    for release in RELEASES {
        let values = chart_values(release);
        let documents = render_chart(release);
        let rendered = rights(&documents, release.namespace);
        let namespaces: Vec<String> = values["namespaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|namespace| namespace.as_str().unwrap().to_string())
            .collect();
        let account = (
            "ServiceAccount".to_string(),
            release.name.to_string(),
            release.namespace.to_string(),
        );
        let operator_role = format!("{}-operator", release.name);
        let mut expected_bindings = Vec::new();
        if namespaces.is_empty() {
            assert_eq!(
                rendered.cluster.as_ref(),
                Some(&operator_rules),
                "{}",
                release.name
            );
            assert!(rendered.per_namespace.is_empty());
            expected_bindings.push((
                "ClusterRole".to_string(),
                operator_role,
                String::new(),
                vec![account.clone()],
            ));
        } else {
            // Watching some namespaces: a Role in each, no rights beyond them.
            assert!(
                rendered.cluster.is_none(),
                "{}: a ClusterRole with namespaces set",
                release.name
            );
            assert_eq!(
                rendered.per_namespace.keys().cloned().collect::<Vec<_>>(),
                {
                    let mut sorted = namespaces.clone();
                    sorted.sort();
                    sorted
                }
            );
            for rules in rendered.per_namespace.values() {
                assert_eq!(rules, &operator_rules, "{}", release.name);
            }
            for namespace in &namespaces {
                expected_bindings.push((
                    "Role".to_string(),
                    operator_role.clone(),
                    namespace.clone(),
                    vec![account.clone()],
                ));
            }
        }
        if values["leaderElection"].as_bool().unwrap() {
            let name = format!("{}-leader-election", release.name);
            assert_eq!(
                rendered.own.get(&name),
                Some(&lease_rules),
                "{}",
                release.name
            );
            expected_bindings.push((
                "Role".to_string(),
                name,
                release.namespace.to_string(),
                vec![account.clone()],
            ));
        } else {
            assert!(
                rendered.own.is_empty(),
                "{}: a Lease Role without leader election",
                release.name
            );
        }
        let mut found = bindings(&documents);
        found.sort();
        expected_bindings.sort();
        assert_eq!(found, expected_bindings, "{}", release.name);
        // The pods run as that account.
        let (_, deployment) = the_deployment(&documents);
        let pod = deployment.spec.template.spec.as_ref().unwrap();
        assert_eq!(pod.service_account_name.as_deref(), Some(release.name));
    }
}

fn assert_hardened(source: &str, deployment: &Deployment) {
    let pod = deployment.spec.template.spec.as_ref().unwrap();
    let pod_security = pod
        .security_context
        .as_ref()
        .expect("a pod securityContext");
    assert_eq!(pod_security.run_as_non_root, Some(true), "{source}");
    assert!(
        pod_security.run_as_user.is_some_and(|user| user > 0),
        "{source}"
    );
    assert_eq!(
        pod_security
            .seccomp_profile
            .as_ref()
            .map(|profile| profile.type_.as_str()),
        Some("RuntimeDefault"),
        "{source}"
    );
    let container = container(deployment);
    let security = container
        .security_context
        .as_ref()
        .expect("a container securityContext");
    assert_eq!(security.read_only_root_filesystem, Some(true), "{source}");
    assert_eq!(security.allow_privilege_escalation, Some(false), "{source}");
    assert_eq!(security.privileged, None, "{source}");
    let capabilities = security.capabilities.as_ref().unwrap();
    assert_eq!(
        capabilities.drop.as_deref(),
        Some(&["ALL".to_string()][..]),
        "{source}"
    );
    assert_eq!(capabilities.add, None, "{source}");
    let resources = container.resources.as_ref().unwrap();
    assert!(
        resources
            .requests
            .as_ref()
            .is_some_and(|r| r.contains_key("cpu") && r.contains_key("memory")),
        "{source}"
    );
    assert!(
        resources
            .limits
            .as_ref()
            .is_some_and(|l| l.contains_key("memory")),
        "{source}"
    );
    // Alive: /healthz (a follower too); ready: /readyz (only the leader, so the Service sends
    // the client verbs to it).
    for (probe, path) in [
        (&container.liveness_probe, "/healthz"),
        (&container.readiness_probe, "/readyz"),
    ] {
        let get = probe
            .as_ref()
            .and_then(|probe| probe.http_get.as_ref())
            .expect("an HTTP probe");
        assert_eq!(get.path.as_deref(), Some(path), "{source}");
        assert_eq!(
            get.port,
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("http".into()),
            "{source}"
        );
    }
    // The state lives in the cluster (each rollout's status), not in a file.
    assert!(
        flag_values(&args(deployment), "--db").is_empty(),
        "{source}: --db"
    );
}

#[test]
fn the_operator_runs_as_non_root_on_a_read_only_root() {
    for release in RELEASES {
        let documents = render_chart(release);
        let (document, deployment) = the_deployment(&documents);
        assert_hardened(&format!("{} ({})", document.file, release.name), deployment);
    }
    let operator = deploy("deploy/operator.yaml");
    let (document, deployment) = the_deployment(&operator);
    assert_hardened(&document.file, deployment);
}

#[test]
fn the_charts_crds_are_deploy_crds() {
    let link = repo().join("charts/weir/crds/weir.yaml");
    let target = std::fs::read_link(&link).expect("charts/weir/crds/weir.yaml is a symlink");
    assert_eq!(target, Path::new("../../../deploy/crds.yaml"));
    let crds = std::fs::read_dir(repo().join("charts/weir/crds"))
        .unwrap()
        .count();
    assert_eq!(
        crds, 1,
        "charts/weir/crds holds only the link to deploy/crds.yaml"
    );
    assert_eq!(read("charts/weir/crds/weir.yaml"), read("deploy/crds.yaml"));
}

/// The binary crates/weir/Cargo.toml builds: its `[[bin]]` name, or the package's.
fn binary_name() -> (String, String) {
    let manifest = read("crates/weir/Cargo.toml");
    let mut section = "";
    let (mut package, mut bin) = (None, None);
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
        } else if let Some(value) = line.strip_prefix("name = \"") {
            let value = value.trim_end_matches('"').to_string();
            match section {
                "[package]" => package = Some(value),
                "[[bin]]" => bin = bin.or(Some(value)),
                _ => {}
            }
        }
    }
    let package = package.expect("crates/weir/Cargo.toml names its package");
    (package.clone(), bin.unwrap_or(package))
}

#[test]
fn the_dockerfile_runs_the_weir_binary_as_non_root() {
    let (package, binary) = binary_name();
    let dockerfile = read("Dockerfile");
    let instructions: Vec<&str> = dockerfile
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect();
    let stages: Vec<usize> = instructions
        .iter()
        .enumerate()
        .filter(|(_, line)| line.to_ascii_uppercase().starts_with("FROM "))
        .map(|(index, _)| index)
        .collect();
    assert_eq!(stages.len(), 2, "a build stage and a runtime stage");
    let build = instructions[stages[0]..stages[1]].join("\n");
    let runtime = &instructions[stages[1]..];
    assert!(
        build.contains(&format!("cargo build --release --locked -p {package}")),
        "{build}"
    );
    assert!(
        build.contains(&format!("target/release/{binary}")),
        "{build}"
    );
    assert!(
        runtime[0].contains("distroless") && runtime[0].ends_with(":nonroot"),
        "{}",
        runtime[0]
    );
    let users: Vec<&str> = runtime
        .iter()
        .filter_map(|line| line.strip_prefix("USER "))
        .collect();
    assert_eq!(users.len(), 1, "one USER in the runtime stage");
    assert!(
        !matches!(users[0].trim(), "root" | "0" | "0:0"),
        "runs as {}",
        users[0]
    );
    assert!(
        runtime.contains(&format!("ENTRYPOINT [\"/{binary}\"]").as_str()),
        "{runtime:?}"
    );
    let operator = deploy("deploy/operator.yaml");
    let (_, deployment) = the_deployment(&operator);
    let port = container(deployment).ports.as_ref().unwrap()[0].container_port;
    assert!(
        runtime.contains(&format!("EXPOSE {port}").as_str()),
        "{runtime:?}"
    );
    let ignored = read(".dockerignore");
    for path in ["target/", ".git/"] {
        assert!(
            ignored.lines().any(|line| line.trim() == path),
            ".dockerignore lacks {path}"
        );
    }
}

// The renderer and the reader themselves.

fn render(text: &str, values: Value) -> Result<String, String> {
    let root = json!({"Values": values, "Release": {"Name": "r", "Namespace": "ns"}});
    gotmpl::render("t.yaml", text, &root)
}

#[test]
fn trim_markers_and_blocks_behave_as_in_go() {
    let values =
        json!({"a": "x", "on": true, "off": false, "list": ["p", "q"], "empty": [], "zero": 0});
    let cases = [
        ("a  {{ .Values.a }}  b", "a  x  b"),
        ("a \n\t {{- .Values.a -}} \n b", "axb"),
        ("a {{- .Values.a }} b", "ax b"),
        ("a {{ .Values.a -}} \n b", "a xb"),
        (
            "k:\n  {{- if .Values.on }}\n  y: 1\n  {{- else }}\n  n: 1\n  {{- end }}\n",
            "k:\n  y: 1\n",
        ),
        ("{{ if .Values.off }}y{{ else }}n{{ end }}", "n"),
        ("{{ if .Values.zero }}y{{ else }}n{{ end }}", "n"),
        ("{{ if .Values.empty }}y{{ end }}", ""),
        (
            "l:\n{{- range .Values.list }}\n- {{ . }}-{{ $.Release.Name }}\n{{- end }}\n",
            "l:\n- p-r\n- q-r\n",
        ),
        (
            "{{ .Values.a | quote }} {{ quote \"a\\\"b\" }}",
            "\"x\" \"a\\\"b\"",
        ),
        ("{{ .Values.missing_not | default \"d\" }}", "unreachable"),
        // Sprig's default treats false as empty: a boolean with `default true` is always true.
        (
            "{{ .Values.off | default true }} {{ default \"d\" .Values.a }}",
            "true x",
        ),
        (
            "v:{{ toYaml .Values.list | nindent 2 }}",
            "v:\n  - p\n  - q",
        ),
    ];
    for (template, expected) in cases {
        let rendered = render(template, values.clone());
        if template.contains("missing_not") {
            let error = rendered.unwrap_err();
            assert!(
                error.contains("t.yaml:1") && error.contains(".Values.missing_not is not set"),
                "{error}"
            );
        } else {
            assert_eq!(rendered.as_deref(), Ok(expected), "{template:?}");
        }
    }
}

#[test]
fn to_yaml_reads_back_as_the_same_value() {
    let value = json!({
        "requests": {"cpu": "50m", "memory": "64Mi"},
        "tricky": ["true", "1.10", "", "a: b", "#x", "- y", "on", "0.2.0-rc.1", "with space", "ünï"],
        "nested": [{"a": 1, "b": [true, null, 2.5]}, [], {}, [["deep"]]],
        "empty": {},
    });
    let text = gotmpl::to_yaml(&value);
    let read: Value =
        serde_saphyr::from_str(&text).unwrap_or_else(|error| panic!("{error}\n{text}"));
    assert_eq!(read, value, "{text}");
    // Indented by nindent under a key, it still reads back.
    let rendered = render("r:{{ toYaml .Values | nindent 2 }}\n", value.clone()).unwrap();
    let read: Value = serde_saphyr::from_str(&rendered).unwrap();
    assert_eq!(read["r"], value, "{rendered}");
}

#[test]
fn the_renderer_names_the_file_and_construct_it_does_not_support() {
    let refused = [
        ("{{ include \"x\" . }}", "include"),
        ("{{ with .Values.a }}{{ . }}{{ end }}", "with"),
        ("{{ $x := .Values.a }}", "variable"),
        ("{{ .Values.a | upper }}", "upper"),
        ("{{ printf \"%s\" .Values.a }}", "printf"),
        (
            "{{ if .Values.a }}a{{ else if .Values.b }}b{{ end }}",
            "else",
        ),
        ("{{/* a comment */}}", "comment"),
        ("{{ (.Values.a) }}", "'('"),
        ("{{ .Values.a }", "never closed"),
        ("{{ if .Values.a }}a", "no `end`"),
        (
            "{{ range .Values.list }}{{ .Values.a }}{{ end }}",
            "not a map",
        ),
        ("{{ .Values.list }}", "use toYaml"),
        ("{{ .Values.big }}", "would not print"),
        ("{{-.Values.a}}", "trim marker"),
        ("{{ .Values.a | .Values.a }}", "only a function"),
    ];
    let values = json!({"a": "x", "b": "y", "list": ["p"], "big": 1_000_000});
    for (template, construct) in refused {
        let error = render(template, values.clone()).expect_err(template);
        assert!(error.starts_with("t.yaml"), "{template}: {error}");
        assert!(error.contains(construct), "{template}: {error}");
    }
}

#[test]
fn the_reader_refuses_unknown_kinds_and_fields() {
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n";
    assert!(
        parse_manifest("p.yaml", pod)
            .unwrap_err()
            .contains("kind \"Pod\"")
    );
    let typo = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  replica: 2\n  selector: {}\n  template: {}\n";
    let error = parse_manifest("d.yaml", typo).unwrap_err();
    assert!(error.contains(".spec.replica"), "{error}");
    let wrong_type =
        "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: http}]}\n";
    assert!(parse_manifest("s.yaml", wrong_type).is_err());
    let wrong_version = "apiVersion: apps/v2\nkind: Deployment\nmetadata: {name: d}\n";
    assert!(parse_manifest("v.yaml", wrong_version).is_err());
}
