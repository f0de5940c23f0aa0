//! ZIP archives: the central directory is read once (`directory`); packread keeps per
//! member its local-header offset, sizes, method and CRC-32, and finds each member's data
//! lazily (`local`: one local header read, checked) the first time it is read. Members are
//! then plain extents for the shared executor: raw bytes, or `.npy` arrays (`npy_member`),
//! read as samples by [`ZipSamples`] (`samples`).

use std::collections::HashMap;
use std::io::{Read, Seek};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use arc_swap::ArcSwapOption;

use crate::batch::{run_extents, Dest, Extent, Work};
use crate::codec::image::ImageStep;
use crate::codec::{Faults, NpyExpect, Pipeline, Step, Wrapper};
use crate::error::{Error, ErrorKind, Result};
use crate::formats::npy;
use crate::source::{SingleFile, Source, SourceReader};

/// How a member's decode failures are classed: a stream that does not decode is a
/// [`ErrorKind::BadZip`], one that inflates past its declared size a
/// [`ErrorKind::LimitExceeded`].
pub const ZIP_FAULTS: Faults = Faults {
    corrupt: ErrorKind::BadZip,
    overflow: ErrorKind::LimitExceeded,
};

/// How a tar member's read failures are classed (its members are stored: only a short read).
pub const TAR_FAULTS: Faults = Faults {
    corrupt: ErrorKind::BadTar,
    overflow: ErrorKind::LimitExceeded,
};

mod directory;
mod local;
mod npy_member;
mod samples;
mod select;

use directory::LOCAL_HEADER_LEN;
pub use npy_member::NpyLayout;
pub use samples::{SamplePayload, ZipSamples};

pub use select::{fnmatch, sample_payload, Members};

const STORED: u16 = 0;
const DEFLATED: u16 = 8;
/// DEFLATE cannot expand data more than ~1032:1; a member declaring more is malformed.
const MAX_DEFLATE_RATIO: u64 = 1032;

/// Default for [`ZipLimits::max_member_bytes`] (Python re-exports it).
pub const DEFAULT_MAX_MEMBER_BYTES: u64 = 4 << 30;

/// How far an archive is trusted: how many members it may have, how large a member and an
/// NPY header inside one may be, and whether CRC-32s are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZipLimits {
    /// Most members an archive may have.
    pub max_members: usize,
    /// Largest decoded member read (and so allocated).
    pub max_member_bytes: u64,
    /// Check every member's CRC-32.
    pub verify_crc: bool,
    /// Limits for NPY headers inside members.
    pub npy: npy::Limits,
}

impl Default for ZipLimits {
    fn default() -> Self {
        ZipLimits {
            max_members: 10_000_000,
            max_member_bytes: DEFAULT_MAX_MEMBER_BYTES,
            verify_crc: true,
            npy: npy::Limits::default(),
        }
    }
}

/// One member, as the central directory describes it.
#[derive(Debug)]
pub struct Member {
    name: String,
    name_raw: Box<[u8]>,
    header_offset: u64,
    compressed_size: u64,
    size: u64,
    method: u16,
    crc32: u32,
    encrypted: bool,
    /// First byte past this member's room: the next local header or the central directory.
    end_limit: u64,
    /// Where the member's data starts, plus one; 0 until its local header was read.
    data_start: AtomicU64,
    /// A stored `.npy` member's header, once read (lock-free, as `data_start`: a fork while
    /// another thread fills it in leaves nothing locked).
    npy_layout: ArcSwapOption<NpyLayout>,
}

impl Member {
    /// The name as zipfile decodes it: UTF-8 (flag bit 11) or code page 437, cut at a NUL.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Bytes once decoded, as the central directory declares them.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes the data takes in the archive, as the central directory declares them (a stored
    /// member whose two sizes differ is refused when read).
    pub fn compressed_size(&self) -> u64 {
        self.compressed_size
    }

    /// The ZIP compression method (0 stored, 8 deflated, ...).
    pub fn method(&self) -> u16 {
        self.method
    }

    /// The central directory's CRC-32 of the decoded bytes, checked on read when
    /// [`ZipLimits::verify_crc`] is set.
    pub fn crc32(&self) -> u32 {
        self.crc32
    }

    /// Whether general-purpose flag bit 0 marks the member encrypted (such a member is
    /// refused when read).
    pub fn is_encrypted(&self) -> bool {
        self.encrypted
    }
}

/// The name of ZIP compression method `id` (APPNOTE 4.4.5), for messages.
fn method_name(id: u16) -> &'static str {
    match id {
        1 => "shrunk",
        2..=5 => "reduced",
        6 => "imploded",
        9 => "deflate64",
        10 => "PKWARE imploded",
        12 => "bzip2",
        14 => "LZMA",
        18 => "IBM TERSE",
        19 => "LZ77",
        20 | 93 => "zstd",
        95 => "xz",
        96 => "JPEG",
        97 => "WavPack",
        98 => "PPMd",
        99 => "AES-encrypted",
        _ => "unknown",
    }
}

/// A readable member's data: where it is and how it is encoded (see [`ZipIndex::member_data`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberData {
    /// Offset in the archive of the first data byte, past the local header.
    pub data_start: u64,
    /// Bytes of data in the archive from `data_start`.
    pub compressed_size: u64,
    /// Bytes once decoded.
    pub size: u64,
    /// The compression method: 0 (stored) or 8 (deflated), the only ones
    /// [`ZipIndex::member_data`] lets through.
    pub method: u16,
    /// The central directory's CRC-32 of the decoded bytes.
    pub crc32: u32,
}

impl MemberData {
    /// Whether the data is stored uncompressed, so that its bytes in the archive are the
    /// member's own.
    pub fn is_stored(&self) -> bool {
        self.method == STORED
    }

    /// The extent reading this member from `file` of a source as `payload`.
    pub fn extent(
        &self,
        file: u32,
        payload: &Payload,
        verify_crc: bool,
        out: u32,
        dst: usize,
    ) -> Extent {
        let mut steps = Vec::with_capacity(3);
        if self.method == DEFLATED {
            steps.push(Step::Inflate(Wrapper::Raw));
        }
        if verify_crc {
            steps.push(Step::Crc32(self.crc32));
        }
        let decoded_len = match payload {
            Payload::Raw => self.size as usize,
            Payload::Npy(expect) => {
                steps.push(Step::NpyStream(expect.clone()));
                expect.data_len()
            }
            Payload::Image(step) => {
                let len = step.spec.sample_bytes();
                steps.push(Step::Image(step.clone()));
                len
            }
        };
        let mut pipeline = Pipeline::new(steps);
        if self.method == DEFLATED {
            pipeline = pipeline.with_inner_len(self.size as usize);
        }
        Extent {
            file,
            offset: self.data_start,
            stored_len: self.compressed_size as usize,
            pipeline,
            decoded_len,
            out,
            dest: Dest::At(dst),
        }
    }
}

/// What a member holds, as far as a batch is concerned.
#[derive(Debug, Clone)]
pub enum Payload {
    /// Bytes taken as they are.
    Raw,
    /// An NPY stream whose array data is wanted.
    Npy(Arc<NpyExpect>),
    /// An encoded image, decoded into one sample.
    Image(Arc<ImageStep>),
}

/// An archive's members, and the source their bytes are read from.
pub struct ZipIndex {
    source: SingleFile,
    location: String,
    members: Vec<Member>,
    by_name: HashMap<String, u32>,
    limits: ZipLimits,
    /// Whether this is a tar archive's index ([`ZipIndex::from_tar`]).
    tar: bool,
    /// The first bytes of stored members fetched with their local headers
    /// ([`ZipIndex::prelocate`]), taken once by the NPY header read.
    prefixes: std::sync::Mutex<HashMap<usize, bytes::Bytes>>,
}

fn bad(location: &str, msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::BadZip, location, msg)
}

impl ZipIndex {
    /// Opens the archive in `source` and parses its central directory: read through the
    /// source's metadata reads in blocks (an object's by one request for its tail, the end
    /// records and the directory when it is small, then one for the rest of the directory,
    /// kept in the index cache), or in place when it is in memory.
    pub fn open(source: Arc<dyn Source>, limits: ZipLimits) -> Result<Self> {
        let location = source.name().to_string();
        let members = parse_directory(
            SourceReader::new(&*source),
            source.len(),
            &location,
            &limits,
        )
        .map_err(|e| source.cause(e.as_damage(ErrorKind::BadZip)))?;
        source.opened();
        Ok(ZipIndex::new(SingleFile(source), location, members, limits))
    }

    /// The regular members of the tar archive in `source` ([`crate::formats::tar`]), as stored
    /// members whose data is where the walk found it: every ZIP member's reader (raw bytes,
    /// `.npy` arrays, images, keyed samples) then reads them. A tar has no checksums of its
    /// data, so none is checked. `local`: a local file's index cache entry (see
    /// [`crate::formats::tar::members`]).
    pub fn from_tar(
        source: Arc<dyn Source>,
        limits: ZipLimits,
        local: Option<&crate::remote::IndexCache>,
    ) -> Result<Self> {
        let location = source.name().to_string();
        let entries = crate::formats::tar::members(&*source, limits.max_members, local)
            .map_err(|e| source.cause(e.as_damage(ErrorKind::BadTar)))?;
        source.opened();
        let members = entries
            .into_iter()
            .map(|e| Member {
                name_raw: e.name.as_bytes().into(),
                name: e.name,
                header_offset: e.header,
                compressed_size: e.size,
                size: e.size,
                method: STORED,
                crc32: 0,
                encrypted: false,
                end_limit: e.data + e.size,
                data_start: AtomicU64::new(e.data + 1),
                npy_layout: ArcSwapOption::empty(),
            })
            .collect();
        let limits = ZipLimits {
            verify_crc: false,
            ..limits
        };
        let mut index = ZipIndex::new(SingleFile(source), location, members, limits);
        index.tar = true;
        Ok(index)
    }
}

/// Central directory to members (see [`directory`]), each member's room ending where the
/// next local header starts: data running past it overlaps another member (the zip-bomb
/// pattern) and is refused when read.
fn parse_directory<R: Read + Seek>(
    mut reader: R,
    file_len: u64,
    location: &str,
    limits: &ZipLimits,
) -> Result<Vec<Member>> {
    let dir = directory::read_directory(&mut reader, file_len, location, limits.max_members)?;
    let mut members: Vec<Member> = dir
        .entries
        .into_iter()
        .map(|e| Member {
            name: e.name,
            name_raw: e.name_raw,
            header_offset: e.header_offset,
            compressed_size: e.compressed_size,
            size: e.size,
            method: e.method,
            crc32: e.crc32,
            encrypted: e.flags & 1 != 0,
            end_limit: dir.start,
            data_start: AtomicU64::new(0),
            npy_layout: ArcSwapOption::empty(),
        })
        .collect();
    let mut order: Vec<usize> = (0..members.len()).collect();
    order.sort_unstable_by_key(|&i| members[i].header_offset);
    for pair in order.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if members[a].header_offset == members[b].header_offset {
            return Err(bad(
                location,
                format!(
                    "members {:?} and {:?} overlap (same local header)",
                    members[a].name, members[b].name
                ),
            ));
        }
        members[a].end_limit = members[b].header_offset;
    }
    Ok(members)
}

impl ZipIndex {
    fn new(source: SingleFile, location: String, members: Vec<Member>, limits: ZipLimits) -> Self {
        let by_name = members
            .iter()
            .enumerate()
            .map(|(i, m)| (m.name.clone(), i as u32))
            .collect();
        ZipIndex {
            source,
            location,
            members,
            by_name,
            limits,
            tar: false,
            prefixes: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The archive's name in messages: its source's (a path, a URL, `<bytes>`).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// Every member, in central-directory order: a member's position here is the `i` the
    /// other methods take.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// How a member's read failures are classed: as ZIP's, or a tar's.
    pub fn faults(&self) -> Faults {
        if self.tar {
            TAR_FAULTS
        } else {
            ZIP_FAULTS
        }
    }

    /// Whether this is a tar archive's index.
    pub fn is_tar(&self) -> bool {
        self.tar
    }

    /// How many members the archive has.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the archive has no members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The limits the archive was opened with.
    pub fn limits(&self) -> &ZipLimits {
        &self.limits
    }

    /// The position of member `name` (the last one, if the name repeats), or a `KeyError`
    /// naming it.
    pub fn position(&self, name: &str) -> Result<usize> {
        self.by_name.get(name).map(|&i| i as usize).ok_or_else(|| {
            Error::new(
                ErrorKind::Key,
                &self.location,
                format!("there is no member named {name:?}"),
            )
        })
    }

    /// How member `i` is named in messages: the archive and the member's name.
    pub fn member_location(&self, i: usize) -> String {
        format!("{}:{}", self.location, self.members[i].name)
    }

    /// Refuses members packread cannot or will not decode, before any allocation.
    pub(crate) fn check_readable(&self, i: usize) -> Result<()> {
        let m = &self.members[i];
        let at = || self.member_location(i);
        if m.encrypted {
            return Err(Error::new(
                ErrorKind::Unsupported,
                at(),
                "member is encrypted",
            ));
        }
        match m.method {
            STORED if m.compressed_size != m.size => Err(bad(
                &at(),
                format!(
                    "stored member has {} compressed but {} uncompressed bytes",
                    m.compressed_size, m.size
                ),
            )),
            STORED | DEFLATED => {
                if m.size > self.limits.max_member_bytes {
                    return Err(Error::new(
                        ErrorKind::LimitExceeded,
                        at(),
                        format!(
                            "member is {} bytes, more than the limit of {} (max_member_bytes)",
                            m.size, self.limits.max_member_bytes
                        ),
                    ));
                }
                if m.method == DEFLATED
                    && m.size
                        > m.compressed_size
                            .saturating_mul(MAX_DEFLATE_RATIO)
                            .saturating_add(1024)
                {
                    return Err(Error::new(
                        ErrorKind::LimitExceeded,
                        at(),
                        format!(
                            "member declares {} bytes from {} compressed: more than DEFLATE can produce",
                            m.size, m.compressed_size
                        ),
                    ));
                }
                Ok(())
            }
            other => Err(Error::new(
                ErrorKind::Unsupported,
                at(),
                format!(
                    "compression method {other} ({}) is not supported; only stored and deflated",
                    method_name(other)
                ),
            )),
        }
    }

    /// Everything needed to read member `i`: checked, local header found.
    pub fn member_data(&self, i: usize) -> Result<MemberData> {
        self.check_readable(i)?;
        let m = &self.members[i];
        Ok(MemberData {
            data_start: self.data_start(i)?,
            compressed_size: m.compressed_size,
            size: m.size,
            method: m.method,
            crc32: m.crc32,
        })
    }

    /// An extent reading member `i` as `payload` into output `out` at `dst`.
    pub fn extent(&self, i: usize, payload: &Payload, out: u32, dst: usize) -> Result<Extent> {
        Ok(self
            .member_data(i)?
            .extent(0, payload, self.limits.verify_crc, out, dst))
    }

    /// The whole decoded member `i` (CRC-checked).
    pub fn read(&self, i: usize) -> Result<Vec<u8>> {
        self.check_readable(i)?;
        let mut out = vec![0u8; self.members[i].size as usize];
        self.read_into(i, &mut out, None)?;
        Ok(out)
    }

    /// Decodes member `i` (CRC-checked) straight into `out`, which must be exactly its size
    /// ([`Member::size`]): no staging copy, so a member's read peaks at its own size.
    pub fn read_into(&self, i: usize, out: &mut [u8], threads: Option<usize>) -> Result<()> {
        crate::batch::tiling::check_out_len(out.len(), 1, self.members[i].size as usize)?;
        let extent = self.extent(i, &Payload::Raw, 0, 0)?;
        self.run(std::slice::from_ref(&extent), &[i], &mut [out], threads)
    }

    /// Runs extents of members `members` (the k-th extent reads `members[k]`) on the pool,
    /// or inline when they are tiny; a failure names the member.
    pub fn run(
        &self,
        extents: &[Extent],
        members: &[usize],
        outs: &mut [&mut [u8]],
        threads: Option<usize>,
    ) -> Result<()> {
        let work = Work::new(
            extents.len(),
            extents.iter().map(|e| e.decoded_len as u64).sum(),
        );
        run_extents(
            &self.source,
            extents,
            outs,
            self.faults(),
            work,
            threads,
            |k, e| e.at(self.member_location(members[k])),
        )
    }

    fn keep_prefix(&self, i: usize, bytes: bytes::Bytes) {
        let mut kept = self.prefixes.lock().unwrap_or_else(|e| e.into_inner());
        // Taken by the batch that fetched them; a bound in case a batch failed before.
        if kept.len() < 1 << 16 {
            kept.insert(i, bytes);
        }
    }

    fn take_prefix(&self, i: usize, want: usize) -> Option<Vec<u8>> {
        let mut kept = self.prefixes.lock().unwrap_or_else(|e| e.into_inner());
        let bytes = kept.remove(&i)?;
        (bytes.len() >= want).then(|| bytes[..want].to_vec())
    }

    /// Where the bytes are read from.
    pub fn source(&self) -> &Arc<dyn Source> {
        self.source.source()
    }

    /// The archive as the engine's one file.
    pub fn files(&self) -> &SingleFile {
        &self.source
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-member stored archive written byte by byte (local header, data, central directory,
    /// end record), so that the directory parser runs with no file and no C library (under Miri
    /// too: `make miri`).
    fn tiny_zip(name: &str, data: &[u8], crc: u32) -> Vec<u8> {
        let mut z = Vec::new();
        let n = name.len() as u16;
        let len = data.len() as u32;
        z.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        for v in [20u16, 0, 0, 0, 0] {
            z.extend_from_slice(&v.to_le_bytes());
        }
        for v in [crc, len, len] {
            z.extend_from_slice(&v.to_le_bytes());
        }
        z.extend_from_slice(&n.to_le_bytes());
        z.extend_from_slice(&0u16.to_le_bytes());
        z.extend_from_slice(name.as_bytes());
        z.extend_from_slice(data);
        let cd = z.len() as u32;
        z.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        for v in [20u16, 20, 0, 0, 0, 0] {
            z.extend_from_slice(&v.to_le_bytes());
        }
        for v in [crc, len, len] {
            z.extend_from_slice(&v.to_le_bytes());
        }
        for v in [n, 0, 0, 0, 0] {
            z.extend_from_slice(&v.to_le_bytes());
        }
        for v in [0u32, 0] {
            z.extend_from_slice(&v.to_le_bytes());
        }
        z.extend_from_slice(name.as_bytes());
        let cd_size = z.len() as u32 - cd;
        z.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
        for v in [0u16, 0, 1, 1] {
            z.extend_from_slice(&v.to_le_bytes());
        }
        for v in [cd_size, cd] {
            z.extend_from_slice(&v.to_le_bytes());
        }
        z.extend_from_slice(&0u16.to_le_bytes());
        z
    }

    #[test]
    fn directory_of_a_stored_member() {
        let z = tiny_zip("a.bin", b"hello", 0x3610_a686);
        let index = ZipIndex::open(
            crate::source::memory("t.zip", z.clone()),
            ZipLimits::default(),
        )
        .unwrap();
        assert_eq!(index.len(), 1);
        let m = &index.members()[0];
        assert_eq!((m.name(), m.size(), m.method()), ("a.bin", 5, 0));
        assert_eq!(m.crc32(), 0x3610_a686);
        assert_eq!(index.position("a.bin").unwrap(), 0);
        assert_eq!(index.data_start(0).unwrap(), 30 + 5);
    }

    #[test]
    fn truncated_or_damaged_directories_are_errors_not_panics() {
        let z = tiny_zip("a.bin", b"hello", 0x3610_a686);
        for cut in 0..z.len() {
            // The end record is the last 22 bytes: every shorter prefix has none.
            assert!(ZipIndex::open(
                crate::source::memory("t.zip", z[..cut].to_vec()),
                ZipLimits::default()
            )
            .is_err());
        }
        for at in 0..z.len() {
            let mut bad = z.clone();
            bad[at] ^= 0xA5;
            // Damage anywhere is an error at open or at the member, or harmless (a field such
            // as the time); a member that opens never starts past the bytes.
            if let Ok(index) = ZipIndex::open(
                crate::source::memory("t.zip", bad.clone()),
                ZipLimits::default(),
            ) {
                for i in 0..index.len() {
                    if let Ok(start) = index.data_start(i) {
                        assert!(start <= bad.len() as u64, "damage at byte {at}");
                    }
                }
            }
        }
    }
}
