//! Tar archives (ustar, GNU and PAX, as Python's `tarfile` and webdataset write them), read in
//! place: one walk over the 512-byte headers finds every regular member's name, data offset
//! and size ([`walk`]); the members are then stored extents, read at random like a stored ZIP
//! member ([`crate::formats::zip::ZipIndex::from_tar`]).
//!
//! The walk seeks over member data in a local file (one `pread` of 512 bytes a member), reads
//! memory in place, and streams an object in large reads (a header every few hundred kilobytes
//! would cost a round trip each otherwise); what it found is kept in the object's index cache
//! ([`Source::keep_parsed`]), keyed by URL and ETag, and a local file's in the same cache keyed
//! by its path, size, modification time and inode ([`crate::remote::local_index`]), so that a
//! reopen walks nothing.
//!
//! Only regular files become members. Directories, symbolic and hard links, devices, FIFOs,
//! GNU sparse files and volume headers are skipped, never followed. Nothing is ever extracted,
//! so names with `..` or a leading `/` are only names.
//!
//! Compressed tars cannot be read at random: a gzip, bzip2, xz or zstd stream is refused with
//! a message saying how to convert it.

use crate::error::{Error, ErrorKind, Result};
use crate::remote::IndexCache;
use crate::source::Source;

/// Bytes of a tar block (a header, and the unit data is padded to).
pub const BLOCK: u64 = 512;

/// Largest GNU long name or PAX header read (real ones are a few hundred bytes).
const MAX_META_BYTES: u64 = 1 << 20;

/// Bytes one read of a streamed walk (object storage) fetches.
const STREAM_BLOCK: usize = 8 << 20;

/// Name under which an object's walked members are kept in its index cache.
const PARSED_NAME: &str = "tar-members-v1";

/// One regular member: its name, where its header and data start, and its size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TarEntry {
    /// The member's path (a GNU long name or PAX `path` when there is one).
    pub name: String,
    /// Offset of its (last) header.
    pub header: u64,
    /// Offset of its first data byte.
    pub data: u64,
    /// Bytes of data.
    pub size: u64,
}

fn bad(location: &str, msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::BadTar, location, msg)
}

/// What the first bytes of a compressed stream are, for the message refusing it.
pub fn compression_of(head: &[u8]) -> Option<&'static str> {
    if head.starts_with(&[0x1f, 0x8b]) {
        Some("gzip")
    } else if head.starts_with(b"BZh") {
        Some("bzip2")
    } else if head.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
        Some("xz")
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Some("zstd")
    } else {
        None
    }
}

/// The name a compressed tar's uncompressed copy takes in the message refusing it.
fn uncompressed_name(location: &str) -> String {
    let base = location.rsplit('/').next().unwrap_or(location);
    let lower = base.to_lowercase();
    for suffix in [".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar.zst"] {
        if lower.ends_with(suffix) {
            return format!("{}.tar", &base[..base.len() - suffix.len()]);
        }
    }
    "out.tar".to_string()
}

/// Reads the archive's bytes for the walk: in place from memory, a header at a time from a
/// local file, in large blocks from a source that waits on a network.
struct Cursor<'a> {
    source: &'a dyn Source,
    block: Vec<u8>,
    block_at: u64,
    stream: bool,
}

impl<'a> Cursor<'a> {
    fn new(source: &'a dyn Source) -> Cursor<'a> {
        Cursor {
            source,
            block: Vec::new(),
            block_at: 0,
            stream: source.waits(),
        }
    }

    /// `len` bytes at `at` (the caller checked they are inside the source).
    fn get(&mut self, at: u64, len: usize) -> Result<&[u8]> {
        if let Some(all) = self.source.bytes() {
            return Ok(&all[at as usize..at as usize + len]);
        }
        let end = self.block_at + self.block.len() as u64;
        if at < self.block_at || at + len as u64 > end {
            let want = if self.stream {
                len.max(STREAM_BLOCK)
            } else {
                len
            };
            let n = (want as u64).min(self.source.len() - at) as usize;
            self.block.resize(n, 0);
            self.source.read_at(at, &mut self.block)?;
            self.block_at = at;
        }
        let from = (at - self.block_at) as usize;
        Ok(&self.block[from..from + len])
    }
}

/// A numeric header field: octal digits (space or NUL padded), or base-256 (a first byte of
/// 0x80, as GNU tar writes sizes of 8 GiB and more). `None` where it is neither, or negative.
fn number(field: &[u8]) -> Option<u64> {
    if let Some((&first, rest)) = field.split_first() {
        if first & 0x80 != 0 {
            if first != 0x80 {
                return None; // 0xff: a negative number
            }
            let mut v: u64 = 0;
            for &b in rest {
                v = v.checked_mul(256)?.checked_add(u64::from(b))?;
            }
            return Some(v);
        }
    }
    let text = field
        .iter()
        .position(|&b| b == 0)
        .map_or(field, |n| &field[..n]);
    let text = std::str::from_utf8(text).ok()?.trim_matches(' ');
    if text.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(text, 8).ok()
}

/// Whether `h`'s checksum field matches its bytes (summed with the field as spaces, unsigned
/// or signed, as `tarfile` accepts either).
fn checksum_ok(h: &[u8]) -> bool {
    let Some(stored) = number(&h[148..156]) else {
        return false;
    };
    let (mut unsigned, mut signed) = (0u64, 0i64);
    for (i, &b) in h.iter().enumerate() {
        let b = if (148..156).contains(&i) { b' ' } else { b };
        unsigned += u64::from(b);
        signed += i64::from(b as i8);
    }
    stored == unsigned || i64::try_from(stored).is_ok_and(|s| s == signed)
}

/// A NUL-terminated text field, as `tarfile` decodes names (UTF-8; bytes that are not, as
/// U+FFFD).
fn text(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

/// What the PAX records of one extended header set for the next member.
#[derive(Default)]
struct Pax {
    path: Option<String>,
    size: Option<u64>,
    sparse: bool,
}

/// Parses PAX records (`"<len> <key>=<value>\n"`, `len` counting the whole record), checking
/// each record's length against its bytes.
fn pax_records(data: &[u8], location: &str, at: u64) -> Result<Pax> {
    let mut pax = Pax::default();
    let mut rest = data;
    let lie = |why: &str| bad(location, format!("the PAX header at byte {at} {why}"));
    while !rest.is_empty() {
        if rest.iter().all(|&b| b == 0) {
            break; // padding some writers leave
        }
        let space = rest
            .iter()
            .position(|&b| b == b' ')
            .ok_or_else(|| lie("has a record with no length"))?;
        let len: usize = std::str::from_utf8(&rest[..space])
            .ok()
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| lie("has a record whose length is not a number"))?;
        if len <= space + 1 || len > rest.len() || rest[len - 1] != b'\n' {
            return Err(lie(&format!(
                "has a record whose length ({len}) does not match its bytes"
            )));
        }
        let record = &rest[space + 1..len - 1];
        let eq = record
            .iter()
            .position(|&b| b == b'=')
            .ok_or_else(|| lie("has a record with no '='"))?;
        let (key, value) = (&record[..eq], &record[eq + 1..]);
        match key {
            b"path" => pax.path = Some(String::from_utf8_lossy(value).into_owned()),
            b"size" => {
                let size = std::str::from_utf8(value)
                    .ok()
                    .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| lie("has a size record that is not a number"))?;
                pax.size = Some(size);
            }
            k if k.starts_with(b"GNU.sparse.") => pax.sparse = true,
            _ => {}
        }
        rest = &rest[len..];
    }
    Ok(pax)
}

/// Every regular member of the tar archive in `source`, in archive order: from the index
/// cache when it was walked before (`local`: a local file's entry; else an object's own),
/// else by walking its headers (see the module), then kept there.
pub fn members(
    source: &dyn Source,
    max_members: usize,
    local: Option<&IndexCache>,
) -> Result<Vec<TarEntry>> {
    let kept = match local {
        Some(cache) => cache.blob(PARSED_NAME),
        None => source.parsed(PARSED_NAME),
    };
    if let Some(entries) = kept.and_then(|k| decode_kept(&k, source.len())) {
        if entries.len() <= max_members {
            return Ok(entries);
        }
    }
    let entries = walk(source, max_members)?;
    match local {
        Some(cache) => {
            cache.put_blob(PARSED_NAME, encode_kept(&entries));
            cache.save();
        }
        None if source.waits() => source.keep_parsed(PARSED_NAME, encode_kept(&entries)),
        None => {}
    }
    Ok(entries)
}

/// Walks the headers of the tar archive in `source` (see the module).
pub fn walk(source: &dyn Source, max_members: usize) -> Result<Vec<TarEntry>> {
    let location = source.name().to_string();
    let len = source.len();
    let mut cursor = Cursor::new(source);
    if len >= 6 {
        if let Some(kind) = compression_of(cursor.get(0, 6)?) {
            return Err(Error::new(
                ErrorKind::Unsupported,
                &location,
                format!(
                    "a {kind}-compressed tar cannot be read at random; convert it once into an \
                     uncompressed tar (or a ZIP): packread convert {} {}",
                    crate::source::shown(std::path::Path::new(&location)),
                    uncompressed_name(&location)
                ),
            ));
        }
    }
    let mut entries = Vec::new();
    let mut pos = 0u64;
    let mut long_name: Option<(String, u64)> = None;
    let mut pax: Option<(Pax, u64)> = None;
    loop {
        if pos >= len {
            break; // no end-of-archive blocks: read to the end, as tarfile does
        }
        if len - pos < BLOCK {
            return Err(bad(
                &location,
                format!(
                    "truncated: the header at byte {pos} is cut short ({} of 512 bytes)",
                    len - pos
                ),
            ));
        }
        let h: [u8; 512] = cursor.get(pos, 512)?.try_into().expect("512 bytes");
        if h.iter().all(|&b| b == 0) {
            break; // end of archive
        }
        if !checksum_ok(&h) {
            return Err(bad(
                &location,
                format!(
                    "the header at byte {pos} fails its checksum: not a tar header, or damaged"
                ),
            ));
        }
        let mut size = number(&h[124..136]).ok_or_else(|| {
            bad(
                &location,
                format!("the header at byte {pos} has a size that is not a number"),
            )
        })?;
        let kind = h[156];
        let (pax_now, pax_at) = match pax.take() {
            Some((p, at)) => (Some(p), at),
            None => (None, 0),
        };
        if kind != b'x' && kind != b'g' {
            if let Some(s) = pax_now.as_ref().and_then(|p| p.size) {
                size = s;
            }
        }
        let data = pos + BLOCK;
        let end = data
            .checked_add(size)
            .filter(|&e| e <= len)
            .ok_or_else(|| {
                bad(
                    &location,
                    format!(
                        "truncated: the member at byte {pos} declares {size} bytes, past the end \
                     of the file ({len} bytes)"
                    ),
                )
            })?;
        let next = data + size.div_ceil(BLOCK) * BLOCK;
        let meta = |what: &str, cursor: &mut Cursor<'_>| -> Result<Vec<u8>> {
            if size > MAX_META_BYTES {
                return Err(Error::new(
                    ErrorKind::LimitExceeded,
                    &location,
                    format!("the {what} at byte {pos} is {size} bytes, more than 1 MiB"),
                ));
            }
            Ok(cursor.get(data, size as usize)?.to_vec())
        };
        match kind {
            b'L' => {
                let raw = meta("GNU long name", &mut cursor)?;
                long_name = Some((text(&raw), pos));
                if let Some(p) = pax_now {
                    pax = Some((p, pax_at));
                }
            }
            b'K' => {
                // A long link target: links are skipped, so is their target's name.
                meta("GNU long link name", &mut cursor)?;
                if let Some(p) = pax_now {
                    pax = Some((p, pax_at));
                }
            }
            b'x' => {
                let raw = meta("PAX header", &mut cursor)?;
                pax = Some((pax_records(&raw, &location, pos)?, pos));
            }
            b'g' => {
                // Global records (a default for every member) hold nothing a reader of
                // regular members by path and size needs; checked all the same.
                let raw = meta("PAX global header", &mut cursor)?;
                pax_records(&raw, &location, pos)?;
            }
            _ => {
                let name = match (long_name.take(), &pax_now) {
                    (_, Some(Pax { path: Some(p), .. })) => p.clone(),
                    (Some((n, _)), _) => n,
                    _ => {
                        let name = text(&h[0..100]);
                        let ustar = &h[257..263] == b"ustar\0";
                        let prefix = if ustar {
                            text(&h[345..500])
                        } else {
                            String::new()
                        };
                        if prefix.is_empty() {
                            name
                        } else {
                            format!("{prefix}/{name}")
                        }
                    }
                };
                let sparse = kind == b'S' || pax_now.as_ref().is_some_and(|p| p.sparse);
                let regular = matches!(kind, b'0' | 0 | b'7') && !name.ends_with('/');
                if regular && !sparse {
                    if entries.len() >= max_members {
                        return Err(Error::new(
                            ErrorKind::LimitExceeded,
                            &location,
                            format!("more than {max_members} members"),
                        ));
                    }
                    entries.push(TarEntry {
                        name,
                        header: pos,
                        data,
                        size: end - data,
                    });
                }
            }
        }
        pos = next;
    }
    if let Some((name, at)) = long_name {
        return Err(bad(
            &location,
            format!("the GNU long name {name:?} at byte {at} has no member after it"),
        ));
    }
    if let Some((_, at)) = pax {
        return Err(bad(
            &location,
            format!("the PAX header at byte {at} has no member after it"),
        ));
    }
    Ok(entries)
}

/// The members as kept in an index cache: per member its header, data and size offsets and
/// its name's length, then the name.
fn encode_kept(entries: &[TarEntry]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for e in entries {
        for v in [e.header, e.data, e.size, e.name.len() as u64] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(e.name.as_bytes());
    }
    out
}

/// Kept members back, checked against the object's length: `None` where they are not what
/// [`encode_kept`] wrote for it (a cache file damaged or edited), and the walk runs again.
fn decode_kept(bytes: &[u8], len: u64) -> Option<Vec<TarEntry>> {
    let mut rest = bytes;
    let mut take = |n: usize| -> Option<&[u8]> {
        let (a, b) = rest.split_at_checked(n)?;
        rest = b;
        Some(a)
    };
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    let count = word(take(8)?);
    let mut entries = Vec::with_capacity(count.min(1 << 20) as usize);
    for _ in 0..count {
        let header = word(take(8)?);
        let data = word(take(8)?);
        let size = word(take(8)?);
        let name_len = usize::try_from(word(take(8)?)).ok()?;
        let name = String::from_utf8(take(name_len)?.to_vec()).ok()?;
        if data != header.checked_add(BLOCK)? || data.checked_add(size)? > len {
            return None;
        }
        entries.push(TarEntry {
            name,
            header,
            data,
            size,
        });
    }
    rest.is_empty().then_some(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ustar header for `name` of `size` bytes of kind `kind`, its checksum filled in.
    fn header(name: &str, size: u64, kind: u8) -> Vec<u8> {
        let mut h = vec![0u8; 512];
        h[..name.len()].copy_from_slice(name.as_bytes());
        h[100..107].copy_from_slice(b"0000644");
        h[124..135].copy_from_slice(format!("{size:011o}").as_bytes());
        h[156] = kind;
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        seal(&mut h);
        h
    }

    fn seal(h: &mut [u8]) {
        h[148..156].copy_from_slice(b"        ");
        let sum: u64 = h.iter().map(|&b| u64::from(b)).sum();
        h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
    }

    fn member(out: &mut Vec<u8>, name: &str, data: &[u8], kind: u8) {
        out.extend(header(name, data.len() as u64, kind));
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }

    fn archive() -> Vec<u8> {
        let mut t = Vec::new();
        member(&mut t, "a/0001.jpg", b"jpeg bytes", b'0');
        member(&mut t, "a/0001.cls", b"3", b'0');
        member(&mut t, "a/link.jpg", b"", b'2');
        member(&mut t, "dir/", b"", b'5');
        let long = "x".repeat(150) + ".txt";
        member(
            &mut t,
            "././@LongLink",
            format!("{long}\0").as_bytes(),
            b'L',
        );
        member(&mut t, "xxxx", b"long", b'0');
        let record = "path=p/q.json\n";
        let rec = format!("{} {record}", record.len() + 3);
        member(&mut t, "PaxHeader", rec.as_bytes(), b'x');
        member(&mut t, "short", b"{}", b'0');
        t.extend([0u8; 1024]);
        t
    }

    fn run(bytes: Vec<u8>) -> Result<Vec<TarEntry>> {
        walk(&*crate::source::memory("t.tar", bytes), 1_000)
    }

    #[test]
    fn regular_members_long_names_and_pax_paths() {
        let t = archive();
        let entries = run(t.clone()).unwrap();
        let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        let long = "x".repeat(150) + ".txt";
        assert_eq!(
            names,
            ["a/0001.jpg", "a/0001.cls", long.as_str(), "p/q.json"]
        );
        let first = &entries[0];
        assert_eq!(
            &t[first.data as usize..][..first.size as usize],
            b"jpeg bytes"
        );
        assert_eq!(entries[3].size, 2);
        let kept = encode_kept(&entries);
        assert_eq!(decode_kept(&kept, t.len() as u64).unwrap(), entries);
        assert!(decode_kept(&kept[..kept.len() - 1], t.len() as u64).is_none());
        assert!(decode_kept(&kept, 100).is_none());
    }

    #[test]
    fn base_256_sizes_and_signed_checksums() {
        let mut field = [0u8; 12];
        field[0] = 0x80;
        field[11] = 5;
        assert_eq!(number(&field), Some(5));
        field[0] = 0xff;
        assert_eq!(number(&field), None);
        assert_eq!(number(b"00000000012\0"), Some(10));
        assert_eq!(number(b"  12 \0"), Some(10));
        assert_eq!(number(b"0009"), None);
        let mut h = header("a.bin", 0, b'0');
        h[0] = 0xE9; // a byte that sums differently signed
        h[148..156].copy_from_slice(b"        ");
        let signed: i64 = h.iter().map(|&b| i64::from(b as i8)).sum();
        h[148..155].copy_from_slice(format!("{signed:06o}\0").as_bytes());
        assert!(checksum_ok(&h));
    }

    #[test]
    fn damage_is_an_error_never_a_panic() {
        let t = archive();
        for cut in 0..t.len() {
            let _ = run(t[..cut].to_vec());
        }
        for at in 0..t.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut bad = t.clone();
                bad[at] ^= flip;
                if let Ok(entries) = run(bad.clone()) {
                    for e in entries {
                        assert!(e.data + e.size <= bad.len() as u64, "damage at byte {at}");
                    }
                }
            }
        }
    }

    #[test]
    fn each_fault_is_named() {
        let t = archive();
        // A cut inside a header, and one inside a member's data.
        let e = run(t[..1100].to_vec()).unwrap_err();
        assert!(e.to_string().contains("cut short"), "{e}");
        let e = run(t[..520].to_vec()).unwrap_err();
        assert!(e.to_string().contains("past the end"), "{e}");
        let mut sum = t.clone();
        sum[0] = b'b';
        let e = run(sum).unwrap_err();
        assert!(e.to_string().contains("checksum"), "{e}");
        let mut huge = header("a.bin", 0, b'0');
        huge[124] = 0x80;
        huge[135] = 0x40;
        seal(&mut huge);
        let e = run(huge).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadTar);
        let mut lying = Vec::new();
        member(&mut lying, "PaxHeader", b"99 path=a.txt\n", b'x');
        member(&mut lying, "a.txt", b"x", b'0');
        let e = run(lying).unwrap_err();
        assert!(e.to_string().contains("PAX"), "{e}");
        let mut orphan = Vec::new();
        member(&mut orphan, "././@LongLink", b"name.jpg\0", b'L');
        let e = run(orphan).unwrap_err();
        assert!(e.to_string().contains("no member after it"), "{e}");
        let e = run(vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
    }
}
