//! The HDF5 filters packread decodes itself: shuffle, Fletcher-32 and LZF. Each is small and
//! has no maintained Rust crate that decodes into a caller's slice with HDF5's exact rules
//! (shuffle's trailing bytes, Fletcher-32's legacy byte order, LZF's bounded output).
use super::CodecError;

/// Undoes HDF5's byte shuffle: input holds byte 0 of every element, then byte 1, ...; bytes
/// past the last whole element stay where they are.
pub fn unshuffle(input: &[u8], out: &mut [u8], itemsize: usize) -> Result<(), CodecError> {
    if input.len() != out.len() {
        return Err(CodecError::Corrupt(format!(
            "shuffle: {} bytes in, {} out",
            input.len(),
            out.len()
        )));
    }
    if itemsize == 0 {
        return Err(CodecError::Params(
            "shuffle without an element size (filter parameter missing)".into(),
        ));
    }
    if itemsize == 1 {
        out.copy_from_slice(input);
        return Ok(());
    }
    let count = input.len() / itemsize;
    let body = count * itemsize;
    for (b, plane) in input[..body]
        .chunks_exact(count.max(1))
        .enumerate()
        .take(itemsize)
    {
        for (i, &byte) in plane.iter().enumerate() {
            out[i * itemsize + b] = byte;
        }
    }
    out[body..].copy_from_slice(&input[body..]);
    Ok(())
}

/// HDF5's Fletcher-32 over 16-bit big-endian words (`H5_checksum_fletcher32`).
pub fn fletcher32(data: &[u8]) -> u32 {
    let (mut sum1, mut sum2) = (0u32, 0u32);
    let words = data.chunks_exact(2);
    let odd = words.remainder().first().copied();
    let mut pending = 0;
    for w in words {
        sum1 += u32::from(u16::from_be_bytes([w[0], w[1]]));
        sum2 += sum1;
        pending += 1;
        if pending == 360 {
            sum1 = (sum1 & 0xffff) + (sum1 >> 16);
            sum2 = (sum2 & 0xffff) + (sum2 >> 16);
            pending = 0;
        }
    }
    if pending > 0 {
        sum1 = (sum1 & 0xffff) + (sum1 >> 16);
        sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    }
    if let Some(b) = odd {
        sum1 += u32::from(b) << 8;
        sum2 += sum1;
        sum1 = (sum1 & 0xffff) + (sum1 >> 16);
        sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    }
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    (sum2 << 16) | sum1
}

/// Checks the Fletcher-32 trailer of `input` and copies the data before it to `out`.
pub fn strip_fletcher32(input: &[u8], out: &mut [u8]) -> Result<(), CodecError> {
    let Some(n) = input.len().checked_sub(4) else {
        return Err("chunk too short for its Fletcher-32 checksum".into());
    };
    if out.len() != n {
        return Err(CodecError::Corrupt(format!(
            "fletcher32: {n} data bytes, expected {}",
            out.len()
        )));
    }
    let stored = u32::from_le_bytes([input[n], input[n + 1], input[n + 2], input[n + 3]]);
    let sum = fletcher32(&input[..n]);
    // libhdf5 before 1.6.3 wrote the checksum with its bytes swapped; it still accepts both.
    let legacy = u32::from_be_bytes(sum.to_le_bytes());
    if stored != sum && stored != legacy {
        return Err(CodecError::Checksum(format!(
            "Fletcher-32 checksum mismatch: stored {stored:08x}, data has {sum:08x}"
        )));
    }
    out.copy_from_slice(&input[..n]);
    Ok(())
}

/// Decodes an LZF block into exactly `out`.
pub fn lzf_decompress(input: &[u8], out: &mut [u8]) -> Result<(), CodecError> {
    lzf_decode(input, out, None)
}

/// Decodes the first `out.len()` bytes of an LZF block of `full` bytes (the rows a batch needs
/// from a chunk of several samples may all lie in its first part). The rest of the block is
/// not decoded; with `check`, its tokens are walked and checked, so a block a whole decode
/// would refuse (cut short, too long, a reference before its start) is refused here too
/// (without, for a block that an earlier decode already checked whole).
pub fn lzf_decompress_prefix(
    input: &[u8],
    out: &mut [u8],
    full: usize,
    check: bool,
) -> Result<(), CodecError> {
    if out.len() > full {
        return Err(CodecError::Corrupt(format!(
            "an LZF prefix of {} bytes of a {full}-byte block",
            out.len()
        )));
    }
    lzf_decode(input, out, Some((full, check)))
}

fn lzf_bad(what: &str) -> CodecError {
    CodecError::Corrupt(format!("corrupt LZF stream ({what})"))
}

/// Walks the tokens of an LZF stream from `ip` (output position `op`) to its end without
/// writing anything, with the checks of a decode: the stream must produce exactly `full`
/// bytes.
fn lzf_check_rest(
    input: &[u8],
    mut ip: usize,
    mut op: usize,
    full: usize,
) -> Result<(), CodecError> {
    while ip < input.len() {
        let ctrl = usize::from(input[ip]);
        ip += 1;
        let len = if ctrl < 32 {
            let len = ctrl + 1;
            if ip + len > input.len() {
                return Err(lzf_bad("literal past the input"));
            }
            ip += len;
            len
        } else {
            let mut len = ctrl >> 5;
            if len == 7 {
                len += usize::from(*input.get(ip).ok_or_else(|| lzf_bad("truncated length"))?);
                ip += 1;
            }
            let low = usize::from(*input.get(ip).ok_or_else(|| lzf_bad("truncated offset"))?);
            ip += 1;
            if ((ctrl & 0x1f) << 8) + low + 1 > op {
                return Err(lzf_bad("reference before the start"));
            }
            len + 2
        };
        if op + len > full {
            return Err(lzf_bad("output past the chunk size"));
        }
        op += len;
    }
    if op != full {
        return Err(CodecError::Corrupt(format!(
            "LZF stream holds {op} bytes, expected {full}"
        )));
    }
    Ok(())
}

/// Bytes a literal run copies at once where input and output have room (a run is at most 32).
const LITERAL_BLOCK: usize = 32;
/// Bytes a back reference copies at a time where its distance is at least this (each block's
/// source then ends before the block starts) and the output has room.
const MATCH_BLOCK: usize = 16;

/// LZF's decoder, hand-written: the format is a few lines (literal runs and back references),
/// a prefix decode, which no LZF crate offers, is the point of having it here, and its fast
/// paths (fixed-size block copies that may write past a token's end into bytes the next tokens
/// overwrite, as liblzf's decoder does) make it several times faster than a copy per token on
/// the short matches of image data.
fn lzf_decode(
    input: &[u8],
    out: &mut [u8],
    prefix_of: Option<(usize, bool)>,
) -> Result<(), CodecError> {
    let (mut ip, mut op) = (0usize, 0usize);
    let prefix = prefix_of.is_some();
    let (full, check) = prefix_of.unwrap_or((out.len(), true));
    let rest = |ip: usize, op: usize| {
        if check {
            lzf_check_rest(input, ip, op, full)
        } else {
            Ok(())
        }
    };
    let bad = |what: &str| format!("corrupt LZF stream ({what})");
    while ip < input.len() {
        let ctrl = usize::from(input[ip]);
        ip += 1;
        if ctrl < 32 {
            let len = ctrl + 1;
            let src = input
                .get(ip..ip + len)
                .ok_or_else(|| bad("literal past the input"))?;
            if prefix && op + len >= out.len() {
                if op + len > full {
                    return Err(bad("output past the chunk size").into());
                }
                let take = out.len() - op;
                out[op..].copy_from_slice(&src[..take]);
                return rest(ip + len, op + len);
            }
            if op + len > out.len() {
                return Err(bad("output past the chunk size").into());
            }
            if ip + LITERAL_BLOCK <= input.len() && op + LITERAL_BLOCK <= out.len() {
                // SAFETY: both ranges are in bounds (checked just above) and lie in different
                // buffers. The bytes written past `op + len` are written again by the tokens
                // that follow (the stream fills `out` in order up to its end).
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        input.as_ptr().add(ip),
                        out.as_mut_ptr().add(op),
                        LITERAL_BLOCK,
                    );
                }
            } else {
                out[op..op + len].copy_from_slice(src);
            }
            ip += len;
            op += len;
        } else {
            let mut len = ctrl >> 5;
            if len == 7 {
                len += usize::from(*input.get(ip).ok_or_else(|| bad("truncated length"))?);
                ip += 1;
            }
            len += 2;
            let low = usize::from(*input.get(ip).ok_or_else(|| bad("truncated offset"))?);
            ip += 1;
            let back = ((ctrl & 0x1f) << 8) + low + 1;
            let from = op
                .checked_sub(back)
                .ok_or_else(|| bad("reference before the start"))?;
            let mut stop = None;
            if prefix && op + len >= out.len() {
                if op + len > full {
                    return Err(bad("output past the chunk size").into());
                }
                stop = Some(op + len);
                len = out.len() - op;
            }
            if op + len > out.len() {
                return Err(bad("output past the chunk size").into());
            }
            if back >= MATCH_BLOCK && op + len + MATCH_BLOCK <= out.len() {
                let base = out.as_mut_ptr();
                let mut k = 0;
                while k < len {
                    // SAFETY: block k reads [from + k, from + k + 16), which ends at or before
                    // op + k (back >= 16): bytes already written, apart from the block written
                    // now, [op + k, op + k + 16), which ends before op + len + 16 <= out.len().
                    // Bytes written past op + len are written again by the tokens that follow.
                    unsafe {
                        std::ptr::copy_nonoverlapping(base.add(from + k), base.add(op + k), 16);
                    }
                    k += MATCH_BLOCK;
                }
            } else if back >= len {
                out.copy_within(from..from + len, op);
            } else {
                // Overlapping copy: the last `back` bytes repeat. Copy in blocks that never
                // overlap their source, doubling as the written run grows.
                let mut done = 0;
                while done < len {
                    let step = (back + done).min(len - done);
                    out.copy_within(from..from + step, op + done);
                    done += step;
                }
            }
            op += len;
            if let Some(end) = stop {
                return rest(ip, end);
            }
        }
    }
    if op != out.len() {
        return Err(CodecError::Corrupt(format!(
            "LZF stream holds {op} bytes, expected {}",
            out.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unshuffle_round_trip() {
        let data: Vec<u8> = (0..23u8).collect(); // 5 four-byte items + 3 trailing bytes
        let mut shuffled = vec![0u8; 23];
        for i in 0..5 {
            for b in 0..4 {
                shuffled[b * 5 + i] = data[i * 4 + b];
            }
        }
        shuffled[20..].copy_from_slice(&data[20..]);
        let mut out = vec![0u8; 23];
        unshuffle(&shuffled, &mut out, 4).unwrap();
        assert_eq!(out, data);
    }

    #[test]
    fn fletcher32_known_values() {
        // Worked by hand from H5_checksum_fletcher32: words 0x6162, 0x6364, then 0x65 << 8.
        assert_eq!(fletcher32(b"abcde"), 0x4FF0_29C7);
        let mut chunk = b"abcdef".to_vec();
        chunk.extend(fletcher32(b"abcdef").to_le_bytes());
        let mut out = [0u8; 6];
        strip_fletcher32(&chunk, &mut out).unwrap();
        assert_eq!(&out, b"abcdef");
        chunk[0] ^= 1;
        assert!(matches!(
            strip_fletcher32(&chunk, &mut out),
            Err(CodecError::Checksum(m)) if m.contains("mismatch")
        ));
    }

    #[test]
    fn lzf_literals_and_back_references() {
        // "abcabcabcabc": literal "abc" then a back-reference of 9 bytes, distance 3.
        let stream = [2u8, b'a', b'b', b'c', (7 << 5), 0, 2];
        let mut out = [0u8; 12];
        lzf_decompress(&stream, &mut out).unwrap();
        assert_eq!(&out, b"abcabcabcabc");
        let mut short = [0u8; 11];
        assert!(lzf_decompress(&stream, &mut short).is_err());
        assert!(lzf_decompress(&[(1 << 5), 5], &mut [0u8; 3]).is_err());
        // Prefixes stop inside the literal and inside the back reference.
        for n in 0..=12 {
            let mut head = vec![0u8; n];
            lzf_decompress_prefix(&stream, &mut head, 12, true).unwrap();
            assert_eq!(&head[..], &b"abcabcabcabc"[..n]);
            // The rest of the stream is still checked: a block of another size is refused.
            assert!(lzf_decompress_prefix(&stream, &mut head, 11, true).is_err());
            assert!(lzf_decompress_prefix(&stream, &mut head, 13, true).is_err());
            assert!(lzf_decompress_prefix(&stream[..6], &mut head, 12, true).is_err());
            // Unless it was checked before: only what is decoded is.
            if n < 12 {
                lzf_decompress_prefix(&stream, &mut head, 13, false).unwrap();
            }
        }
        assert!(lzf_decompress_prefix(&[(1 << 5), 5], &mut [0u8; 3], 3, true).is_err());
    }
}
