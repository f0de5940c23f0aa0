//! Bindings for the epoch order: `epoch_order`, and `shard_order` for `"shard"` mode.

use numpy::PyArray1;
use pyo3::prelude::*;

use super::errors::invalid_argument;
use crate::order::{chunk_order, sample_order, shard_order as order_of_shards, ShardLayout};

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(epoch_order, m)?)?;
    m.add_function(wrap_pyfunction!(shard_order, m)?)?;
    Ok(())
}

/// The permutation of `0..n` an epoch visits samples in, fixed by `(seed, epoch)`: uniform when
/// `chunk` is 1, else whole chunks of `chunk` samples shuffled and then the samples of each
/// window of `window` chunks shuffled among themselves.
#[pyfunction]
#[pyo3(signature = (n, seed, epoch, chunk = 1, window = 1))]
fn epoch_order<'py>(
    py: Python<'py>,
    n: usize,
    seed: u64,
    epoch: u64,
    chunk: usize,
    window: usize,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    if chunk == 0 || window == 0 {
        return Err(invalid_argument(py, "chunk and window must be at least 1"));
    }
    let order = py.detach(|| {
        let mut out = vec![0i64; n];
        if chunk == 1 {
            sample_order(seed, epoch, &mut out);
        } else {
            chunk_order(seed, epoch, chunk, window, &mut out);
        }
        out
    });
    Ok(PyArray1::from_vec(py, order))
}

/// The samples one rank reads in an epoch in `"shard"` mode, in batch order (see
/// `crate::order::shard_order`); a `ValueError` when there are too few shards.
#[pyfunction]
#[pyo3(signature = (lengths, seed, epoch, batch, rank, world, workers, drop_last, window))]
#[allow(clippy::too_many_arguments)] // one per setting of the Python plan
fn shard_order<'py>(
    py: Python<'py>,
    lengths: Vec<usize>,
    seed: u64,
    epoch: u64,
    batch: usize,
    rank: usize,
    world: usize,
    workers: usize,
    drop_last: bool,
    window: usize,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let layout = ShardLayout {
        lengths: &lengths,
        batch,
        rank,
        world,
        workers,
        drop_last,
        window,
    };
    let order = py
        .detach(|| order_of_shards(&layout, seed, epoch))
        .map_err(|e| invalid_argument(py, e))?;
    Ok(PyArray1::from_vec(py, order))
}
