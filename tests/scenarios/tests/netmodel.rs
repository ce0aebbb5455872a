//! The model network per kernel and as one batch on the bench's Rust DSP model: one crossing and
//! one `HAP_mmap` per distinct lease per model run for the batch, five crossings and one map per
//! view for the per-kernel launches, and the simulated latency the cost model gives each.

use std::time::Duration;

use hexrpc_bench::CostModel;
use hexrpc_scenarios::netmodel::measure;

#[test]
fn the_model_runs_as_one_batch_with_one_crossing_and_one_map_per_lease() {
    let cost = CostModel {
        per_crossing: Duration::from_micros(60),
        per_kib_copied: Duration::from_micros(2),
        sleep: false,
        ..CostModel::default()
    };
    let f = measure(cost, 20).unwrap();
    assert_eq!(f.runs, 20);
    assert_eq!(f.per_kernel.crossings, 5.0);
    assert_eq!(f.batch.crossings, 1.0);
    assert_eq!(f.distinct_leases, 2, "weights and activations");
    assert_eq!(f.batch.maps, 2.0, "one map per distinct lease per call");
    assert_eq!(f.per_kernel.maps, 14.0, "one map per view per launch: 4 + 2 + 2 + 4 + 2");
    // Each crossing copies well under 1 KiB of arguments: 62 us simulated per crossing.
    assert_eq!(f.per_kernel.latency_us, 5.0 * 62.0);
    assert_eq!(f.batch.latency_us, 62.0);
    assert!(f.batch_pack_ns > 0.0);
}
