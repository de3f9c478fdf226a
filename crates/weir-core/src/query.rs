//! Query templates in the style of Flagger's MetricTemplate: Go-template placeholders such as
//! `{{ namespace }}`, `{{ variables.path }}` and `{{ printf "%s-canary" target }}`, filled from a
//! map of variables. Only what metric queries use is supported; anything else is an error that
//! names the placeholder, never a silently wrong query.

use std::collections::BTreeMap;

use crate::model::{KubernetesTarget, Metric, ObjectReference, Rollout};

/// Why a template cannot be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// A `{{` without its `}}`.
    #[error("a `{{{{` at byte {0} has no closing `}}}}`")]
    Unclosed(usize),
    /// A name that is not among the variables.
    #[error("unknown variable `{name}` (known: {known})")]
    UnknownVariable {
        /// The name used.
        name: String,
        /// The names available, comma-separated.
        known: String,
    },
    /// An action other than a variable or `printf`.
    #[error(
        "`{{{{ {0} }}}}` is not supported: use a variable such as `{{{{ namespace }}}}` or `{{{{ printf \"%s\" name }}}}`"
    )]
    Unsupported(String),
    /// A `printf` whose verbs and arguments do not match.
    #[error("`printf {0}`: the format needs as many %s as there are arguments")]
    Printf(String),
}

/// Fills every placeholder of `template` from `variables`. Template variables are looked up as
/// `variables.<key>`, as in Flagger.
pub fn render(
    template: &str,
    variables: &BTreeMap<String, String>,
) -> Result<String, TemplateError> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    let mut offset = 0;
    while let Some(open) = rest.find("{{") {
        let mut literal = &rest[..open];
        let after_open = &rest[open + 2..];
        let close = after_open
            .find("}}")
            .ok_or(TemplateError::Unclosed(offset + open))?;
        let mut action = &after_open[..close];
        // `{{-` and `-}}` trim the whitespace next to the action, as in Go.
        if let Some(trimmed) = action.strip_prefix('-') {
            action = trimmed;
            literal = literal.trim_end();
        }
        let trim_after = action.ends_with('-') && action.len() > 1;
        if trim_after {
            action = &action[..action.len() - 1];
        }
        out.push_str(literal);
        out.push_str(&evaluate(action.trim(), variables)?);
        let consumed = open + 2 + close + 2;
        offset += consumed;
        rest = &rest[consumed..];
        if trim_after {
            let trimmed = rest.trim_start();
            offset += rest.len() - trimmed.len();
            rest = trimmed;
        }
    }
    out.push_str(rest);
    Ok(out)
}

fn evaluate(action: &str, variables: &BTreeMap<String, String>) -> Result<String, TemplateError> {
    if let Some(arguments) = action.strip_prefix("printf ") {
        return printf(arguments.trim(), variables);
    }
    lookup(action, variables)
}

fn lookup(name: &str, variables: &BTreeMap<String, String>) -> Result<String, TemplateError> {
    // Go templates also accept `.variables.x`-style access on a context; plain names are what
    // Flagger's templates use, and both spellings mean the same here.
    let key = name.strip_prefix('.').unwrap_or(name);
    if key.is_empty() || key.contains(char::is_whitespace) || key.contains('(') {
        return Err(TemplateError::Unsupported(name.to_string()));
    }
    variables
        .get(key)
        .cloned()
        .ok_or_else(|| TemplateError::UnknownVariable {
            name: key.to_string(),
            known: variables.keys().cloned().collect::<Vec<_>>().join(", "),
        })
}

fn printf(arguments: &str, variables: &BTreeMap<String, String>) -> Result<String, TemplateError> {
    let failure = || TemplateError::Printf(arguments.to_string());
    let format = arguments.strip_prefix('"').ok_or_else(failure)?;
    let end = format.find('"').ok_or_else(failure)?;
    let (format, values) = (&format[..end], &format[end + 1..]);
    let mut values = values
        .split_whitespace()
        .map(|argument| match argument.strip_prefix('"') {
            Some(quoted) => Ok(quoted.trim_end_matches('"').to_string()),
            None => lookup(argument, variables),
        })
        .collect::<Result<Vec<_>, _>>()?
        .into_iter();
    let mut out = String::new();
    let mut pieces = format.split("%s");
    out.push_str(pieces.next().unwrap_or_default());
    for piece in pieces {
        out.push_str(&values.next().ok_or_else(failure)?);
        out.push_str(piece);
    }
    if values.next().is_some() {
        return Err(failure());
    }
    Ok(out)
}

/// The placeholders a query may use: `name`, `namespace`, `target`, `service`, `ingress`,
/// `route`, `interval`, `version` (the canary's revision, when the target knows it) and
/// `variables.<key>` from the metric's `templateVariables`. Every metric provider fills its
/// queries from these.
pub fn variables(rollout: &Rollout, metric: &Metric) -> BTreeMap<String, String> {
    let kubernetes = rollout.spec.target.kubernetes();
    let reference_name = |reference: fn(&KubernetesTarget) -> Option<&ObjectReference>| {
        kubernetes
            .and_then(reference)
            .map(|reference| reference.name.clone())
    };
    let name = rollout.metadata.name.clone();
    let target = reference_name(|k| k.target_ref.as_ref()).unwrap_or_else(|| name.clone());
    let service = kubernetes
        .and_then(|k| k.service.as_ref())
        .and_then(|service| service.name.clone())
        .unwrap_or_else(|| target.clone());
    let version = rollout
        .spec
        .target
        .local()
        .map(|local| local.canary.revision())
        .unwrap_or_default();
    let interval = metric
        .interval
        .map_or_else(|| "1m".to_string(), |interval| interval.to_string());
    let mut variables: BTreeMap<String, String> = [
        ("name", name),
        (
            "namespace",
            rollout.metadata.namespace_or_default().to_string(),
        ),
        ("target", target),
        ("service", service),
        (
            "ingress",
            reference_name(|k| k.ingress_ref.as_ref()).unwrap_or_default(),
        ),
        (
            "route",
            reference_name(|k| k.route_ref.as_ref()).unwrap_or_default(),
        ),
        ("interval", interval),
        ("version", version),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_string(), value))
    .collect();
    for (key, value) in &metric.template_variables {
        variables.insert(format!("variables.{key}"), value.clone());
    }
    variables
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn variables() -> BTreeMap<String, String> {
        [
            ("name", "web"),
            ("namespace", "shop"),
            ("target", "web"),
            ("service", "web-svc"),
            ("interval", "1m"),
            ("variables.path", "/api"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    #[test]
    fn placeholders_are_filled_with_or_without_spaces() {
        let query = r#"sum(rate(x{ns="{{ namespace }}",pod=~"{{target}}-[0-9]+",path="{{ variables.path }}"}[{{ interval }}]))"#;
        assert_eq!(
            render(query, &variables()).unwrap(),
            r#"sum(rate(x{ns="shop",pod=~"web-[0-9]+",path="/api"}[1m]))"#
        );
    }

    #[test]
    fn printf_formats_its_arguments() {
        let query = r#"{{ printf "kube_%s__%s_canary" namespace service }}"#;
        assert_eq!(
            render(query, &variables()).unwrap(),
            "kube_shop__web-svc_canary"
        );
        assert_eq!(
            render(r#"{{ printf "%s" }}"#, &variables()),
            Err(TemplateError::Printf(r#""%s""#.into()))
        );
    }

    #[test]
    fn dashes_trim_whitespace_like_go() {
        assert_eq!(render("a  {{- name -}}  b", &variables()).unwrap(), "awebb");
    }

    #[test]
    fn unknown_names_and_unclosed_actions_are_errors() {
        let error = render("{{ variables.direction }}", &variables()).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("unknown variable `variables.direction`")
                && error.to_string().contains("namespace"),
            "{error}"
        );
        assert_eq!(
            render("x {{ name", &variables()),
            Err(TemplateError::Unclosed(2))
        );
        assert!(matches!(
            render("{{ len name }}", &variables()),
            Err(TemplateError::Unsupported(_))
        ));
    }
}
