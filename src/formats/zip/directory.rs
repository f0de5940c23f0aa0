//! The end records and central directory of a ZIP archive, read as zipfile (and so numpy)
//! reads them: the directory is the `size` bytes just before the end record, walked entry by
//! entry until those bytes are used up; member offsets are shifted by the bytes that precede
//! the archive (a self-extracting stub); the end record's disk fields are not looked at, and
//! the last entry's name, extra field or comment may run past the directory's end (cut off
//! there). Written by hand rather than through the `zip` crate, which reads a directory by its
//! entry count wherever that ends and refuses end records with disk fields that zipfile
//! ignores (thousands of intact archives a fuzzing run made were refused that way). What this
//! adds to zipfile's reading: the end record's entry count must be the number of entries the
//! directory's bytes hold (an end record that says the directory is 0 bytes long but counts 3
//! entries contradicts itself), names repeat at most once each, and every member's local
//! header and data lie before the directory.

use std::io::{Read, Seek, SeekFrom};

use crate::error::{Error, ErrorKind, Result};

const EOCD_SIGNATURE: u32 = 0x0605_4b50;
const EOCD_LEN: usize = 22;
const ZIP64_LOCATOR_SIGNATURE: u32 = 0x0706_4b50;
const ZIP64_LOCATOR_LEN: u64 = 20;
const ZIP64_EOCD_SIGNATURE: u32 = 0x0606_4b50;
const ZIP64_EOCD_LEN: u64 = 56;
const ENTRY_SIGNATURE: u32 = 0x0201_4b50;
const ENTRY_LEN: usize = 46;
/// Fixed local header bytes, before the name and extra field.
pub(super) const LOCAL_HEADER_LEN: usize = 30;

/// One central directory entry, as it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    /// The name as zipfile gives it: UTF-8 (flag bit 11) or code page 437, cut at a NUL.
    pub name: String,
    /// The name's bytes as stored (what the local header must repeat).
    pub name_raw: Box<[u8]>,
    pub flags: u16,
    pub method: u16,
    pub crc32: u32,
    pub compressed_size: u64,
    pub size: u64,
    /// Where the local header is, the bytes before the archive included.
    pub header_offset: u64,
}

/// The central directory: its entries, in order, and where it starts.
#[derive(Debug)]
pub(super) struct Directory {
    pub entries: Vec<Entry>,
    pub start: u64,
}

/// A directory that cannot be read: a `BadZipError` that says so first.
fn invalid(location: &str, msg: impl std::fmt::Display) -> Error {
    super::bad(location, format!("not a valid ZIP archive: {msg}"))
}

fn le16(b: &[u8], at: usize) -> u64 {
    u64::from(u16::from_le_bytes([b[at], b[at + 1]]))
}

fn le32(b: &[u8], at: usize) -> u64 {
    u64::from(u32::from_le_bytes(
        b[at..at + 4].try_into().expect("4 bytes"),
    ))
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// What the end records say.
struct End {
    entries: u64,
    size: u64,
    offset: u64,
    /// Where the directory must end: the (ZIP64) end record.
    record_at: u64,
}

/// Reads the central directory of the archive `reader` holds (`file_len` bytes), checking it
/// as the module says; at most `max_members` entries.
pub(super) fn read_directory<R: Read + Seek>(
    reader: &mut R,
    file_len: u64,
    location: &str,
    max_members: usize,
) -> Result<Directory> {
    let end = end_records(reader, file_len, location)?;
    let start = end.record_at.checked_sub(end.size).ok_or_else(|| {
        invalid(
            location,
            "central directory size runs past the start of the file",
        )
    })?;
    // The bytes before the archive: member offsets count from the archive's first byte.
    let prefix = start
        .checked_sub(end.offset)
        .ok_or_else(|| invalid(location, "central directory offset lies past the directory"))?;
    if end.entries > max_members as u64 {
        return Err(Error::new(
            ErrorKind::LimitExceeded,
            location,
            format!(
                "archive has {} members, more than the limit of {max_members}",
                end.entries
            ),
        ));
    }
    let size = usize::try_from(end.size)
        .map_err(|_| invalid(location, "central directory too large for this platform"))?;
    let mut bytes = vec![0u8; size];
    read_at(reader, start, &mut bytes, location)?;
    let mut entries = Vec::with_capacity(end.entries.min((size / ENTRY_LEN) as u64) as usize);
    let mut at = 0usize;
    while at < size {
        if entries.len() >= max_members {
            return Err(Error::new(
                ErrorKind::LimitExceeded,
                location,
                format!("archive has more than the limit of {max_members} members"),
            ));
        }
        let entry = entry(&bytes, at, prefix, location)?;
        at = entry.1;
        entries.push(entry.0);
    }
    if entries.len() as u64 != end.entries {
        return Err(invalid(
            location,
            format!(
                "end record counts {} members, but its {size}-byte central directory holds {}",
                end.entries,
                entries.len()
            ),
        ));
    }
    let mut names: Vec<&[u8]> = entries.iter().map(|e| &*e.name_raw).collect();
    names.sort_unstable();
    if names.windows(2).any(|w| w[0] == w[1]) {
        return Err(Error::new(
            ErrorKind::Unsupported,
            location,
            "archive has several members with the same name, which packread does not read",
        ));
    }
    for e in &entries {
        // The member's local header and data must lie before the central directory.
        let end = e
            .header_offset
            .checked_add((LOCAL_HEADER_LEN + e.name_raw.len()) as u64)
            .and_then(|f| f.checked_add(e.compressed_size));
        if end.is_none_or(|end| end > start) {
            return Err(invalid(
                location,
                format!(
                    "member {:?}: local header at {} with {} bytes of data does not fit before the central directory at {start}",
                    e.name, e.header_offset, e.compressed_size
                ),
            ));
        }
    }
    Ok(Directory { entries, start })
}

/// The entry at `at` of the directory `cd`, and where the next one starts. The last entry's
/// name, extra field and comment may run past the directory: they are cut off at its end.
fn entry(cd: &[u8], at: usize, prefix: u64, location: &str) -> Result<(Entry, usize)> {
    let fixed = cd.get(at..at + ENTRY_LEN).ok_or_else(|| {
        invalid(
            location,
            format!("central directory ends inside an entry at byte {at}"),
        )
    })?;
    if le32(fixed, 0) != u64::from(ENTRY_SIGNATURE) {
        return Err(invalid(
            location,
            format!("no central directory entry at byte {at} of the directory"),
        ));
    }
    let flags = le16(fixed, 8) as u16;
    let (n, m, k) = (
        le16(fixed, 28) as usize,
        le16(fixed, 30) as usize,
        le16(fixed, 32) as usize,
    );
    let field = |from: usize, len: usize| {
        let from = from.min(cd.len());
        &cd[from..(from + len).min(cd.len())]
    };
    let name_raw = field(at + ENTRY_LEN, n);
    let extra = field(at + ENTRY_LEN + n, m);
    let mut size = le32(fixed, 24);
    let mut compressed_size = le32(fixed, 20);
    let mut header_offset = le32(fixed, 42);
    // Sizes and offset that do not fit 32 bits are in the ZIP64 extra field, in this order.
    let deferred = [
        size == 0xFFFF_FFFF,
        compressed_size == 0xFFFF_FFFF,
        header_offset == 0xFFFF_FFFF,
    ];
    if deferred.contains(&true) {
        let mut values = zip64_extra(extra).ok_or_else(|| {
            invalid(
                location,
                format!("entry at byte {at}: ZIP64 extra field missing or malformed"),
            )
        })?;
        for (slot, wanted) in [&mut size, &mut compressed_size, &mut header_offset]
            .into_iter()
            .zip(deferred)
        {
            if wanted {
                *slot = values.next().ok_or_else(|| {
                    invalid(
                        location,
                        format!("entry at byte {at}: ZIP64 extra field too short"),
                    )
                })?;
            }
        }
    }
    let header_offset = header_offset
        .checked_add(prefix)
        .ok_or_else(|| invalid(location, "member offset overflows"))?;
    let entry = Entry {
        name: decode_name(name_raw, flags),
        name_raw: name_raw.into(),
        flags,
        method: le16(fixed, 10) as u16,
        crc32: le32(fixed, 16) as u32,
        compressed_size,
        size,
        header_offset,
    };
    Ok((entry, at + ENTRY_LEN + n + m + k))
}

/// The values of the ZIP64 extended information extra field (id 1), 8 bytes each.
fn zip64_extra(extra: &[u8]) -> Option<impl Iterator<Item = u64> + '_> {
    let mut rest = extra;
    while rest.len() >= 4 {
        let (id, len) = (le16(rest, 0), le16(rest, 2) as usize);
        let body = rest.get(4..4 + len)?;
        if id == 1 {
            return Some(body.chunks_exact(8).map(|c| le64(c, 0)));
        }
        rest = &rest[4 + len..];
    }
    None
}

/// A name as zipfile decodes it: UTF-8 when flag bit 11 says so (invalid sequences replaced),
/// else code page 437; cut at its first NUL (zipfile's guard against names that hide an
/// extension after one).
fn decode_name(raw: &[u8], flags: u16) -> String {
    let raw = raw.split(|&b| b == 0).next().unwrap_or_default();
    if flags & 0x800 != 0 || raw.is_ascii() {
        return String::from_utf8_lossy(raw).into_owned();
    }
    raw.iter()
        .map(|&b| {
            if b < 0x80 {
                char::from(b)
            } else {
                CP437_HIGH[usize::from(b - 0x80)]
            }
        })
        .collect()
}

/// Code page 437's characters 0x80-0xFF.
const CP437_HIGH: [char; 128] = [
    'Ç', 'ü', 'é', 'â', 'ä', 'à', 'å', 'ç', 'ê', 'ë', 'è', 'ï', 'î', 'ì', 'Ä', 'Å', 'É', 'æ', 'Æ',
    'ô', 'ö', 'ò', 'û', 'ù', 'ÿ', 'Ö', 'Ü', '¢', '£', '¥', '₧', 'ƒ', 'á', 'í', 'ó', 'ú', 'ñ', 'Ñ',
    'ª', 'º', '¿', '⌐', '¬', '½', '¼', '¡', '«', '»', '░', '▒', '▓', '│', '┤', '╡', '╢', '╖', '╕',
    '╣', '║', '╗', '╝', '╜', '╛', '┐', '└', '┴', '┬', '├', '─', '┼', '╞', '╟', '╚', '╔', '╩', '╦',
    '╠', '═', '╬', '╧', '╨', '╤', '╥', '╙', '╘', '╒', '╓', '╫', '╪', '┘', '┌', '█', '▄', '▌', '▐',
    '▀', 'α', 'ß', 'Γ', 'π', 'Σ', 'σ', 'µ', 'τ', 'Φ', 'Θ', 'Ω', 'δ', '∞', 'φ', 'ε', '∩', '≡', '±',
    '≥', '≤', '⌠', '⌡', '÷', '≈', '°', '∙', '·', '√', 'ⁿ', '²', '■', '\u{a0}',
];

fn read_at<R: Read + Seek>(
    reader: &mut R,
    offset: u64,
    buf: &mut [u8],
    location: &str,
) -> Result<()> {
    reader
        .seek(SeekFrom::Start(offset))
        .and_then(|_| reader.read_exact(buf))
        .map_err(|e| invalid(location, format!("cannot read the central directory: {e}")))
}

/// The end record: the last `PK\5\6` signature in the file's last 64 KiB + 22 bytes whose 22
/// bytes fit in the file (its comment length is not checked, as zipfile does not), and the
/// ZIP64 end record its locator points to, just before the locator.
fn end_records<R: Read + Seek>(reader: &mut R, file_len: u64, location: &str) -> Result<End> {
    let tail_len = file_len.min((EOCD_LEN + 65_535) as u64) as usize;
    let mut tail = vec![0u8; tail_len];
    read_at(reader, file_len - tail_len as u64, &mut tail, location)?;
    let pos = (0..=tail_len.saturating_sub(EOCD_LEN))
        .rev()
        .find(|&p| tail_len >= EOCD_LEN && le32(&tail, p) == u64::from(EOCD_SIGNATURE))
        .ok_or_else(|| invalid(location, "no end-of-central-directory record"))?;
    let eocd_at = file_len - (tail_len - pos) as u64;
    let eocd = &tail[pos..pos + EOCD_LEN];
    let mut end = End {
        entries: le16(eocd, 10),
        size: le32(eocd, 12),
        offset: le32(eocd, 16),
        record_at: eocd_at,
    };
    let Some(locator_at) = eocd_at.checked_sub(ZIP64_LOCATOR_LEN) else {
        return Ok(end);
    };
    let mut loc = [0u8; ZIP64_LOCATOR_LEN as usize];
    read_at(reader, locator_at, &mut loc, location)?;
    if le32(&loc, 0) != u64::from(ZIP64_LOCATOR_SIGNATURE) {
        return Ok(end);
    }
    if le32(&loc, 4) != 0 || le32(&loc, 16) > 1 {
        return Err(invalid(
            location,
            "the ZIP64 locator says the archive spans several disks",
        ));
    }
    let record_at = locator_at
        .checked_sub(ZIP64_EOCD_LEN)
        .ok_or_else(|| invalid(location, "ZIP64 end record lies outside the file"))?;
    let mut rec = [0u8; ZIP64_EOCD_LEN as usize];
    read_at(reader, record_at, &mut rec, location)?;
    if le32(&rec, 0) != u64::from(ZIP64_EOCD_SIGNATURE) {
        return Err(invalid(location, "no ZIP64 end record before its locator"));
    }
    end.entries = le64(&rec, 32);
    end.size = le64(&rec, 40);
    end.offset = le64(&rec, 48);
    end.record_at = record_at;
    Ok(end)
}
