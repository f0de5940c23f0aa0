//! Fortran-order to C-order reordering for N-d arrays of fixed-size items.
use super::CodecError;

/// `input` holds an array of logical `shape` in Fortran order; writes it to `out` in C order.
pub fn fortran_to_c(
    input: &[u8],
    out: &mut [u8],
    shape: &[usize],
    itemsize: usize,
) -> Result<(), CodecError> {
    let count: usize = shape.iter().product();
    let total = count * itemsize;
    if input.len() != total || out.len() != total {
        return Err(CodecError::Corrupt(format!(
            "expected {total} bytes for shape {shape:?}, found {} in and {} out",
            input.len(),
            out.len()
        )));
    }
    if count == 0 {
        return Ok(());
    }
    let nd = shape.len();
    // Fortran strides (in items): the first axis varies fastest.
    let mut fstride = vec![1usize; nd];
    for d in 1..nd {
        fstride[d] = fstride[d - 1] * shape[d - 1];
    }
    let inner = shape[nd - 1];
    let inner_stride = fstride[nd - 1] * itemsize;
    let mut index = vec![0usize; nd];
    let mut dst = 0;
    loop {
        // Walk the last (contiguous-in-C) axis; in Fortran order it has the largest stride.
        let base: usize = index
            .iter()
            .zip(&fstride)
            .map(|(i, s)| i * s)
            .sum::<usize>()
            * itemsize;
        for k in 0..inner {
            let src = base + k * inner_stride;
            out[dst..dst + itemsize].copy_from_slice(&input[src..src + itemsize]);
            dst += itemsize;
        }
        // Odometer over the outer axes, last outer axis fastest (C order).
        let mut d = nd - 1;
        loop {
            if d == 0 {
                return Ok(());
            }
            d -= 1;
            index[d] += 1;
            if index[d] < shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transposes_2d_and_3d() {
        // Logical [[1,2,3],[4,5,6]] stored in Fortran order: 1 4 2 5 3 6.
        let input = [1u8, 4, 2, 5, 3, 6];
        let mut out = [0u8; 6];
        fortran_to_c(&input, &mut out, &[2, 3], 1).unwrap();
        assert_eq!(out, [1, 2, 3, 4, 5, 6]);

        // 3-d, 2-byte items: element (i,j,k) has value 100*i + 10*j + k.
        let shape = [2usize, 3, 4];
        let mut f = vec![0u8; 48];
        for i in 0..2 {
            for j in 0..3 {
                for k in 0..4 {
                    let pos = i + 2 * j + 6 * k;
                    let v = (100 * i + 10 * j + k) as u16;
                    f[pos * 2..pos * 2 + 2].copy_from_slice(&v.to_le_bytes());
                }
            }
        }
        let mut c = vec![0u8; 48];
        fortran_to_c(&f, &mut c, &shape, 2).unwrap();
        let vals: Vec<u16> = c
            .chunks(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect();
        let want: Vec<u16> = (0..2)
            .flat_map(|i| {
                (0..3).flat_map(move |j| (0..4).map(move |k| (100 * i + 10 * j + k) as u16))
            })
            .collect();
        assert_eq!(vals, want);
    }

    #[test]
    fn length_mismatch_is_an_error() {
        assert!(fortran_to_c(&[0; 5], &mut [0; 6], &[2, 3], 1).is_err());
    }
}
