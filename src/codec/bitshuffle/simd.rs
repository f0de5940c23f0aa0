//! The bit transpose of bitshuffle blocks with x86-64 vector instructions: SSE2 (every
//! x86-64 CPU has it) for two 8x8 bit matrices at a time, AVX2 (picked at run time) for four.
//! Each gives the same bytes as the scalar [`super::transpose_8x8`] path.

use super::store_groups;
use std::arch::x86_64::*;

/// [`super::transpose_8x8`] on both 64-bit lanes (SSE2, which every x86-64 CPU has).
#[inline]
#[target_feature(enable = "sse2")]
fn transpose_8x8_x2(mut x: __m128i) -> __m128i {
    let m1 = _mm_set1_epi64x(0x00AA_00AA_00AA_00AA);
    let m2 = _mm_set1_epi64x(0x0000_CCCC_0000_CCCC);
    let m3 = _mm_set1_epi64x(0x0000_0000_F0F0_F0F0);
    let mut t = _mm_and_si128(_mm_xor_si128(x, _mm_srli_epi64(x, 7)), m1);
    x = _mm_xor_si128(x, _mm_xor_si128(t, _mm_slli_epi64(t, 7)));
    t = _mm_and_si128(_mm_xor_si128(x, _mm_srli_epi64(x, 14)), m2);
    x = _mm_xor_si128(x, _mm_xor_si128(t, _mm_slli_epi64(t, 14)));
    t = _mm_and_si128(_mm_xor_si128(x, _mm_srli_epi64(x, 28)), m3);
    _mm_xor_si128(x, _mm_xor_si128(t, _mm_slli_epi64(t, 28)))
}

/// [`super::transpose_8x8`] on the four 64-bit lanes.
#[inline]
#[target_feature(enable = "avx2")]
fn transpose_8x8_x4(mut x: __m256i) -> __m256i {
    let m1 = _mm256_set1_epi64x(0x00AA_00AA_00AA_00AA);
    let m2 = _mm256_set1_epi64x(0x0000_CCCC_0000_CCCC);
    let m3 = _mm256_set1_epi64x(0x0000_0000_F0F0_F0F0);
    let mut t = _mm256_and_si256(_mm256_xor_si256(x, _mm256_srli_epi64(x, 7)), m1);
    x = _mm256_xor_si256(x, _mm256_xor_si256(t, _mm256_slli_epi64(t, 7)));
    t = _mm256_and_si256(_mm256_xor_si256(x, _mm256_srli_epi64(x, 14)), m2);
    x = _mm256_xor_si256(x, _mm256_xor_si256(t, _mm256_slli_epi64(t, 14)));
    t = _mm256_and_si256(_mm256_xor_si256(x, _mm256_srli_epi64(x, 28)), m3);
    _mm256_xor_si256(x, _mm256_xor_si256(t, _mm256_slli_epi64(t, 28)))
}

/// Writes byte `j` of the elements of groups `from..` (8 elements a group) from the 8 bit
/// rows, 16 groups per step: an 8x16 byte transpose with unpacks gives each group's 8 row
/// bytes side by side in a 64-bit lane, whose 8x8 bit matrix is then transposed in the
/// register (the scalar path's delta swaps, two groups at once). Returns where it stopped.
pub(super) fn untranspose_16_groups(
    rows: &[&[u8]; 8],
    out: &mut [u8],
    j: usize,
    itemsize: usize,
    from: usize,
) -> usize {
    let row = rows[0].len();
    let steps = row.saturating_sub(from) / 16;
    assert!(rows.iter().all(|r| r.len() == row) && out.len() >= row * 8 * itemsize);
    for s in 0..steps {
        let g0 = from + 16 * s;
        // SAFETY: SSE2 is part of x86-64; every load reads 16 bytes at `g0 <= row - 16`
        // of a row of `row` bytes (checked above).
        let cols = unsafe {
            let r: [__m128i; 8] =
                std::array::from_fn(|k| _mm_loadu_si128(rows[k].as_ptr().add(g0).cast()));
            let t: [__m128i; 8] = [
                _mm_unpacklo_epi8(r[0], r[1]),
                _mm_unpackhi_epi8(r[0], r[1]),
                _mm_unpacklo_epi8(r[2], r[3]),
                _mm_unpackhi_epi8(r[2], r[3]),
                _mm_unpacklo_epi8(r[4], r[5]),
                _mm_unpackhi_epi8(r[4], r[5]),
                _mm_unpacklo_epi8(r[6], r[7]),
                _mm_unpackhi_epi8(r[6], r[7]),
            ];
            let u: [__m128i; 8] = [
                _mm_unpacklo_epi16(t[0], t[2]),
                _mm_unpackhi_epi16(t[0], t[2]),
                _mm_unpacklo_epi16(t[1], t[3]),
                _mm_unpackhi_epi16(t[1], t[3]),
                _mm_unpacklo_epi16(t[4], t[6]),
                _mm_unpackhi_epi16(t[4], t[6]),
                _mm_unpacklo_epi16(t[5], t[7]),
                _mm_unpackhi_epi16(t[5], t[7]),
            ];
            // Register i holds groups g0 + 2i and g0 + 2i + 1, each as 8 row bytes.
            [
                _mm_unpacklo_epi32(u[0], u[4]),
                _mm_unpackhi_epi32(u[0], u[4]),
                _mm_unpacklo_epi32(u[1], u[5]),
                _mm_unpackhi_epi32(u[1], u[5]),
                _mm_unpacklo_epi32(u[2], u[6]),
                _mm_unpackhi_epi32(u[2], u[6]),
                _mm_unpacklo_epi32(u[3], u[7]),
                _mm_unpackhi_epi32(u[3], u[7]),
            ]
        };
        // Each 64-bit lane now holds one group's 8 row bytes: an 8x8 bit matrix, transposed
        // in place (three delta swaps) into the group's 8 output bytes.
        for (i, c) in cols.into_iter().enumerate() {
            // SAFETY: SSE2 register arithmetic, and a 16-byte store into `out` at a group
            // index below `row` (checked above) when elements are single bytes.
            unsafe {
                let x = transpose_8x8_x2(c);
                let g = g0 + 2 * i;
                if itemsize == 1 {
                    _mm_storeu_si128(out.as_mut_ptr().add(g * 8).cast(), x);
                } else {
                    let mut w = [0u64; 2];
                    _mm_storeu_si128(w.as_mut_ptr().cast(), x);
                    store_groups(&w, out, g, j, itemsize);
                }
            }
        }
    }
    from + steps * 16
}

/// As [`untranspose_16_groups`], 32 groups per step in AVX2 registers. The unpacks work
/// within each 128-bit lane, so register i holds groups g0 + 2i, g0 + 2i + 1 in its low
/// lane and g0 + 16 + 2i, g0 + 17 + 2i in its high lane, each stored where it belongs.
///
/// # Safety
/// The CPU has AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn untranspose_32_groups(
    rows: &[&[u8]; 8],
    out: &mut [u8],
    j: usize,
    itemsize: usize,
    from: usize,
) -> usize {
    let row = rows[0].len();
    let steps = row.saturating_sub(from) / 32;
    assert!(rows.iter().all(|r| r.len() == row) && out.len() >= row * 8 * itemsize);
    for s in 0..steps {
        let g0 = from + 32 * s;
        // SAFETY: every load reads 32 bytes at `g0 <= row - 32` of a row of `row` bytes
        // (checked above); AVX2 is there (the caller's promise).
        let r: [__m256i; 8] =
            std::array::from_fn(|k| unsafe { _mm256_loadu_si256(rows[k].as_ptr().add(g0).cast()) });
        let t: [__m256i; 8] = [
            _mm256_unpacklo_epi8(r[0], r[1]),
            _mm256_unpackhi_epi8(r[0], r[1]),
            _mm256_unpacklo_epi8(r[2], r[3]),
            _mm256_unpackhi_epi8(r[2], r[3]),
            _mm256_unpacklo_epi8(r[4], r[5]),
            _mm256_unpackhi_epi8(r[4], r[5]),
            _mm256_unpacklo_epi8(r[6], r[7]),
            _mm256_unpackhi_epi8(r[6], r[7]),
        ];
        let u: [__m256i; 8] = [
            _mm256_unpacklo_epi16(t[0], t[2]),
            _mm256_unpackhi_epi16(t[0], t[2]),
            _mm256_unpacklo_epi16(t[1], t[3]),
            _mm256_unpackhi_epi16(t[1], t[3]),
            _mm256_unpacklo_epi16(t[4], t[6]),
            _mm256_unpackhi_epi16(t[4], t[6]),
            _mm256_unpacklo_epi16(t[5], t[7]),
            _mm256_unpackhi_epi16(t[5], t[7]),
        ];
        let x: [__m256i; 8] = [
            _mm256_unpacklo_epi32(u[0], u[4]),
            _mm256_unpackhi_epi32(u[0], u[4]),
            _mm256_unpacklo_epi32(u[1], u[5]),
            _mm256_unpackhi_epi32(u[1], u[5]),
            _mm256_unpacklo_epi32(u[2], u[6]),
            _mm256_unpackhi_epi32(u[2], u[6]),
            _mm256_unpacklo_epi32(u[3], u[7]),
            _mm256_unpackhi_epi32(u[3], u[7]),
        ];
        for (i, xi) in x.into_iter().enumerate() {
            let t = transpose_8x8_x4(xi);
            let (lo, hi) = (_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
            let (g_lo, g_hi) = (g0 + 2 * i, g0 + 16 + 2 * i);
            if itemsize == 1 {
                // SAFETY: 16-byte stores at group indices below `row` (checked above).
                unsafe {
                    _mm_storeu_si128(out.as_mut_ptr().add(g_lo * 8).cast(), lo);
                    _mm_storeu_si128(out.as_mut_ptr().add(g_hi * 8).cast(), hi);
                }
            } else {
                let mut w = [0u64; 4];
                // SAFETY: stores into a local array of 32 bytes.
                unsafe { _mm256_storeu_si256(w.as_mut_ptr().cast(), t) };
                store_groups(&w[..2], out, g_lo, j, itemsize);
                store_groups(&w[2..], out, g_hi, j, itemsize);
            }
        }
    }
    from + steps * 32
}
