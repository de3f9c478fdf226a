use super::*;

#[test]
fn normal_cdf_known_values() {
    assert!((normal_cdf(0.0) - 0.5).abs() < 1e-7);
    assert!((normal_cdf(1.959_964) - 0.975).abs() < 1e-6);
    assert!((normal_cdf(-Z_99) - 0.01).abs() < 1e-6);
}

#[test]
fn the_threshold_is_the_primarys_p99() {
    let scenario = &Scenario::select("S0")[0];
    let conditions = scenario.conditions(0);
    assert!((conditions.primary_slow - 0.01).abs() < 1e-6);
    assert!((conditions.canary_slow - 0.01).abs() < 1e-6);
}

#[test]
fn latency_scenarios_raise_the_canarys_slow_share() {
    let slow = |name: &str| Scenario::select(name)[0].conditions(0).canary_slow;
    // Median +10%: the p99 threshold sits ln(1.1)/0.5 = 0.19 sigma closer.
    assert!((slow("S3-median10") - 0.0163).abs() < 0.001);
    assert!((slow("S3-median50") - 0.0649).abs() < 0.001);
    // 98% at 1%, 2% at P(z > 2.326 - ln 2 / 0.5) = 17.4%.
    assert!((slow("S3-tail") - 0.0133).abs() < 0.001);
}

#[test]
fn quantile_inverts_cdf() {
    let model = LatencyModel {
        tail_share: 0.02,
        tail_factor: 2.0,
        ..LatencyModel::BASE
    };
    for u in [0.001, 0.1, 0.5, 0.9, 0.99, 0.999] {
        let ms = model.quantile(u);
        assert!((model.cdf(ms) - u).abs() < 1e-9, "{u} -> {ms}");
    }
}

#[test]
fn scenario_selection() {
    let names = |name: &str| -> Vec<String> {
        Scenario::select(name)
            .into_iter()
            .map(|scenario| scenario.name)
            .collect()
    };
    assert_eq!(names("S1"), ["S1"]);
    assert_eq!(names("s1*"), ["S1", "S1-r1.5", "S1-r2", "S1-r5", "S1-r10"]);
    assert_eq!(names("S3"), ["S3-median10", "S3-median50", "S3-tail"]);
    assert_eq!(names("S5").len(), 4);
    assert!(names("S9").is_empty());
    let all = Scenario::all();
    let mut unique: Vec<&str> = all.iter().map(|scenario| scenario.name.as_str()).collect();
    unique.dedup();
    assert_eq!(unique.len(), all.len());
}

#[test]
fn faults_follow_their_schedule() {
    let s4 = &Scenario::select("S4")[0];
    assert!(!s4.fault_active(59));
    assert!(s4.fault_active(60));
    assert!(s4.fault_active(89));
    assert!(!s4.fault_active(90));
    assert!(s4.fault_active(360));
    let s7 = &Scenario::select("S7")[0];
    assert!(!s7.fault_active(599));
    assert!(s7.fault_active(600));
    assert!(!Scenario::select("S0")[0].is_faulty());
    let custom = Scenario::custom(50.0, 0.01, 0.02, 30);
    assert!(custom.is_faulty());
    assert_eq!(custom.onset_s(), Some(30));
    assert!(!Scenario::custom(50.0, 0.01, 0.01, 0).is_faulty());
}
