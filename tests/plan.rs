//! Property tests of the chunk planner: for any array shape, chunk shape, item size and index
//! list (duplicates and any order), every output byte is written exactly once and holds the
//! element asked for (checked against an independent model, tests/common/plan_check.rs).

mod common {
    pub mod plan_check;
}

use common::plan_check::check_plan;
use proptest::prelude::*;

fn geometry() -> impl Strategy<Value = (Vec<usize>, Vec<usize>, usize, Vec<usize>)> {
    (1usize..=4)
        .prop_flat_map(|rank| {
            (
                proptest::collection::vec(1usize..=7, rank),
                proptest::collection::vec(1usize..=5, rank),
                prop_oneof![Just(1usize), Just(2), Just(3), Just(4), Just(8), Just(12)],
            )
        })
        .prop_flat_map(|(shape, chunk, itemsize)| {
            let n = shape[0];
            (
                Just(shape),
                Just(chunk),
                Just(itemsize),
                proptest::collection::vec(0..n, 0..12),
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn every_output_byte_is_written_once_with_the_right_element(
        (shape, chunk, itemsize, rows) in geometry()
    ) {
        check_plan(&shape, &chunk, itemsize, &rows).map_err(TestCaseError::fail)?;
    }
}

#[test]
fn chunks_larger_than_the_array_and_single_rows() {
    check_plan(&[3, 5], &[10, 10], 4, &[2, 0, 2]).unwrap();
    check_plan(&[1], &[1], 8, &[0, 0, 0]).unwrap();
    check_plan(&[9, 1, 7], &[4, 1, 3], 2, &[8, 0, 4, 5]).unwrap();
}

#[test]
fn malformed_chunk_shapes_are_errors() {
    use packread::batch::tiling::Tiling;
    assert!(Tiling::new(&[4, 4], &[2], 1).is_err());
    assert!(Tiling::new(&[4, 4], &[2, 0], 1).is_err());
    assert!(Tiling::new(&[], &[], 1).is_err());
}
