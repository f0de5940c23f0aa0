//! The chunk planner (`batch::tiling::Tiling`) with random shapes, chunk shapes, item sizes and index
//! lists (any order, duplicates): every output byte written exactly once, with the element
//! asked for (the model in tests/common/plan_check.rs).
#![no_main]

#[path = "../../tests/common/plan_check.rs"]
mod plan_check;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&head, rest)) = data.split_first() else {
        return;
    };
    let rank = usize::from(head % 4) + 1;
    let itemsize = [1, 2, 3, 4, 8, 12][usize::from(head / 4 % 6)];
    if rest.len() < 2 * rank {
        return;
    }
    let shape: Vec<usize> = rest[..rank]
        .iter()
        .map(|&b| usize::from(b % 9) + 1)
        .collect();
    let chunk: Vec<usize> = rest[rank..2 * rank]
        .iter()
        .map(|&b| usize::from(b % 7) + 1)
        .collect();
    let rows: Vec<usize> = rest[2 * rank..]
        .iter()
        .take(24)
        .map(|&b| usize::from(b) % shape[0])
        .collect();
    if let Err(e) = plan_check::check_plan(&shape, &chunk, itemsize, &rows) {
        panic!(
            "plan for shape {shape:?}, chunks {chunk:?}, itemsize {itemsize}, rows {rows:?}: {e}"
        );
    }
});
