use super::{labels_of, visible_in};

const EXPOSITION: &str = r#"# HELP weir_rollout_phase 1 for the phase a rollout is in
# TYPE weir_rollout_phase gauge
weir_rollout_phase{namespace="team-a",rollout="web",phase="Progressing"} 1
weir_rollout_phase{namespace="team-b",rollout="web",phase="Progressing"} 1
# TYPE weir_flag_exposures counter
weir_flag_exposures_total{namespace="team-b",flag="banner",variant="blue"} 3
weir_flag_exposures_total{namespace="team-a",flag="banner",variant="blue"} 4
# TYPE weir_engine_ticks counter
weir_engine_ticks_total 12
# TYPE weir_cluster_instance gauge
weir_cluster_instance{instance="node-1-2-ab",host="node"} 1
# TYPE made_up gauge
made_up{rollout="orphan"} 1
made_up{flag="orphan"} 1
made_up{namespace="team-b",namespace="team-a"} 1
made_up{note="namespace=\"team-b\" \\ \n",namespace="team-a"} 1
made_up{broken="team-b} 1
# EOF
"#;

fn limited(namespaces: &[&str]) -> Vec<String> {
    namespaces
        .iter()
        .map(|namespace| (*namespace).to_string())
        .collect()
}

#[test]
fn a_limited_caller_sees_its_namespaces_and_process_wide_series_only() {
    let visible = visible_in(EXPOSITION, &limited(&["team-a"]));
    let expected = r#"# HELP weir_rollout_phase 1 for the phase a rollout is in
# TYPE weir_rollout_phase gauge
weir_rollout_phase{namespace="team-a",rollout="web",phase="Progressing"} 1
# TYPE weir_flag_exposures counter
weir_flag_exposures_total{namespace="team-a",flag="banner",variant="blue"} 4
# TYPE weir_engine_ticks counter
weir_engine_ticks_total 12
# TYPE weir_cluster_instance gauge
weir_cluster_instance{instance="node-1-2-ab",host="node"} 1
# TYPE made_up gauge
made_up{note="namespace=\"team-b\" \\ \n",namespace="team-a"} 1
# EOF
"#;
    assert_eq!(visible, expected);
}

#[test]
fn several_namespaces_and_none_at_all() {
    let both = visible_in(EXPOSITION, &limited(&["team-a", "team-b"]));
    assert!(both.contains(r#"weir_rollout_phase{namespace="team-b""#));
    assert!(both.contains(r#"made_up{namespace="team-b",namespace="team-a"} 1"#));
    // Still no series that names a rollout or flag without its namespace, nor a broken line.
    assert!(!both.contains("orphan"), "{both}");
    assert!(!both.contains("broken"), "{both}");
    let other = visible_in(EXPOSITION, &limited(&["team-c"]));
    assert!(
        other
            .lines()
            .filter(|line| !line.starts_with('#'))
            .all(|line| line.starts_with("weir_engine_ticks_total")
                || line.starts_with("weir_cluster_instance")),
        "{other}"
    );
}

#[test]
fn labels_are_read_with_their_escapes() {
    assert_eq!(labels_of("x 1"), Some(Vec::new()));
    assert_eq!(labels_of("x{} 1"), Some(Vec::new()));
    assert_eq!(
        labels_of(r#"x{a="1",b="q\"uote\\d\n"} 2"#),
        Some(vec![
            ("a", "1".to_string()),
            ("b", "q\"uote\\d\n".to_string())
        ])
    );
    assert_eq!(
        labels_of(r#"x{a="1",} 2"#),
        Some(vec![("a", "1".to_string())])
    );
    assert_eq!(labels_of(r#"x{a=1} 2"#), None);
    assert_eq!(labels_of(r#"x{a="1" b="2"} 2"#), None);
    assert_eq!(labels_of(r#"x{a="open} 2"#), None);
    assert_eq!(labels_of("no_value"), None);
}
