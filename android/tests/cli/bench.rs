//! `hexrpc bench`: every figure present and labelled simulated.

use crate::common::hexrpc;

#[test]
fn bench_json_reports_every_figure_labelled_simulated() {
    let out = hexrpc(&["bench", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("bench --json is JSON");
    for k in [
        "launch_overhead_ns",
        "bench_round_trip_ns",
        "crossings_per_launch",
        "allocations_per_launch",
        "reverse_stream_mib_s",
        "memcpy_mib_s",
    ] {
        let x = v[k].as_f64().unwrap_or_else(|| panic!("{k} missing: {v}"));
        assert!(x.is_finite() && x >= 0.0, "{k} = {x}");
    }
    assert_eq!(v["simulated"], true);
    assert_eq!(v["platform"], "bench");
    assert_eq!(v["crossings_per_launch"].as_f64(), Some(1.0), "exactly one kernel crossing per steady-state launch");
    assert_eq!(v["allocations_per_launch"].as_f64(), Some(0.0), "no heap allocation per launch");
    assert!(v["launch_overhead_ns"].as_f64().unwrap() > 0.0);
    // The model network as one batch: one crossing, one map per distinct lease, cheaper than
    // five launches on the (simulated) cost model.
    assert_eq!(v["batch_crossings_per_model"].as_f64(), Some(1.0));
    assert_eq!(v["batch_maps_per_model"].as_f64(), v["batch_distinct_leases"].as_f64());
    assert!(v["batch_pack_ns"].as_f64().unwrap() > 0.0);
    let lat = &v["model_latency_us"];
    assert_eq!(lat["simulated"], true, "{lat}");
    assert!(lat["batch"].as_f64().unwrap() < lat["per_kernel"].as_f64().unwrap(), "{lat}");
    // The DSP map cache: no map per steady-state launch, one per lease without it, and the
    // simulated launch is cheaper by the maps and unmaps it saves.
    assert_eq!(v["dsp_maps_per_launch"].as_f64(), Some(0.0), "{v}");
    assert_eq!(v["dsp_maps_per_launch_uncached"].as_f64(), v["dsp_map_leases_per_launch"].as_f64(), "{v}");
    let cache = &v["dsp_map_cache"];
    assert_eq!(cache["simulated"], true, "{cache}");
    assert!(cache["launch_latency_us"].as_f64().unwrap() < cache["launch_latency_us_uncached"].as_f64().unwrap(), "{cache}");
}
