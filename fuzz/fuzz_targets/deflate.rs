//! DEFLATE (raw, as in ZIP, and zlib-wrapped, as in HDF5): exactly the declared size or an
//! error; the streaming prefix decoder never returns more than asked; the streaming decoder
//! large members use (`Inflater`, fed in pieces, writing into two buffers) never writes past
//! them, and where both it and the whole-buffer decoder finish, they agree byte for byte.
#![no_main]

use libfuzzer_sys::fuzz_target;
use packread::codec::{inflate, inflate_prefix, Inflater, Wrapper};

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let n = usize::from(u16::from_le_bytes([data[0], data[1]])) * 4;
    let wrapper = if data[2] & 1 == 0 {
        Wrapper::Raw
    } else {
        Wrapper::Zlib
    };
    let piece = 1 + usize::from(data[2] >> 1) * 37;
    let input = &data[3..];
    let mut out = vec![0u8; n];
    let whole = inflate(input, &mut out, wrapper);
    if let Ok(prefix) = inflate_prefix(input, n) {
        assert!(prefix.len() <= n);
    }
    // Streamed: in pieces of `piece` bytes, into a 10-byte head and the rest.
    let mut streamed = vec![0u8; n];
    let split = n.min(10);
    let mut inf = Inflater::new(wrapper);
    let (mut used, mut written) = (0usize, 0usize);
    let ok = loop {
        if inf.is_done() {
            break written == n;
        }
        let (head, tail) = streamed.split_at_mut(split);
        let dst = if written < split {
            &mut head[written..]
        } else {
            &mut tail[written - split..]
        };
        if dst.is_empty() {
            break false; // more output than declared
        }
        let end = (used + piece).min(input.len());
        match inf.inflate(&input[used..end], dst) {
            Ok((0, 0)) => break false,
            Ok((c, w)) => {
                assert!(w <= dst.len());
                used += c;
                written += w;
            }
            Err(_) => break false,
        }
    };
    if ok && whole.is_ok() {
        assert_eq!(out, streamed, "streamed and whole decoding disagree");
    }
});
