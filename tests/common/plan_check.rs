//! An independent model of chunked storage, used by the planner's property test
//! (tests/plan.rs) and fuzz target (fuzz/fuzz_targets/planner.rs): it fills every chunk with
//! each element's global index, applies the pieces [`packread::batch::tiling::Tiling::reads`] plans,
//! and checks that every output byte is written exactly once and holds the right element.

use packread::batch::tiling::Tiling;

/// Element `index` as `itemsize` bytes (little-endian, truncated or zero-padded).
fn element(index: u64, itemsize: usize) -> impl Iterator<Item = u8> {
    (0..itemsize).map(move |b| if b < 8 { (index >> (8 * b)) as u8 } else { 0 })
}

/// Checks the plan for `rows` of an array of `shape` in chunks of `chunk`; `Err` says what is
/// wrong. Shapes must be small (the model materialises every chunk it touches).
pub fn check_plan(
    shape: &[usize],
    chunk: &[usize],
    itemsize: usize,
    rows: &[usize],
) -> Result<(), String> {
    let tiling = Tiling::new(shape, chunk, itemsize)?;
    let rank = shape.len();
    let sample_elems: usize = shape[1..].iter().product();
    let sample_bytes = sample_elems * itemsize;
    let grid: Vec<usize> = shape
        .iter()
        .zip(chunk)
        .map(|(&d, &c)| d.div_ceil(c))
        .collect();
    let per_slab: usize = grid[1..].iter().product();
    let chunk_elems: usize = chunk.iter().product();
    let mut out = vec![0u8; rows.len() * sample_bytes];
    let mut writes = vec![0u8; out.len()];
    for read in tiling.reads(rows) {
        let linear = read.linear as usize;
        let (g, t) = (linear / per_slab, linear % per_slab);
        // The chunk's grid coordinates, then its bytes: each element's global flat index, or
        // 0xEE for the padding past the array's edge.
        let mut coord = vec![0usize; rank];
        coord[0] = g;
        let mut rest = t;
        for d in (1..rank).rev() {
            coord[d] = rest % grid[d];
            rest /= grid[d];
        }
        let mut bytes = Vec::with_capacity(chunk_elems * itemsize);
        let mut local = vec![0usize; rank]; // odometer over the chunk's elements, C order
        for _ in 0..chunk_elems {
            let mut flat = Some(0usize);
            for d in 0..rank {
                let x = coord[d] * chunk[d] + local[d];
                flat = flat.filter(|_| x < shape[d]).map(|f| f * shape[d] + x);
            }
            match flat {
                Some(f) => bytes.extend(element(f as u64, itemsize)),
                None => bytes.extend(std::iter::repeat_n(0xEE, itemsize)),
            }
            for d in (0..rank).rev() {
                local[d] += 1;
                if local[d] < chunk[d] {
                    break;
                }
                local[d] = 0;
            }
        }
        for p in &read.pieces {
            let src = bytes
                .get(p.src..p.src + p.len)
                .ok_or_else(|| format!("piece {p:?} reads past chunk {linear}"))?;
            let dst = out
                .get_mut(p.dst..p.dst + p.len)
                .ok_or_else(|| format!("piece {p:?} writes past the output"))?;
            dst.copy_from_slice(src);
            for w in &mut writes[p.dst..p.dst + p.len] {
                *w += 1;
            }
        }
    }
    if let Some(i) = writes.iter().position(|&w| w != 1) {
        return Err(format!("output byte {i} written {} times", writes[i]));
    }
    let mut want = Vec::with_capacity(out.len());
    for &row in rows {
        for j in 0..sample_elems {
            want.extend(element((row * sample_elems + j) as u64, itemsize));
        }
    }
    if out != want {
        let i = out.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
        return Err(format!(
            "output byte {i} is {}, expected {}",
            out[i], want[i]
        ));
    }
    Ok(())
}
