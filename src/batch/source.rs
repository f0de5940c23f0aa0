//! Where extents read their bytes from. Every read is a positional `pread`: no shared file
//! cursor, so threads and forked processes never disturb each other.

use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind, Result};

/// A set of files the extents of a batch address by number: local files, bytes in memory, or
/// (a later byte source) objects fetched by ranged requests.
pub trait Source: Sync {
    /// Fills `buf` from `file` starting at `offset`; a short file is an error.
    fn read_at(&self, file: u32, offset: u64, buf: &mut [u8]) -> Result<()>;
    /// How `file` is named in error messages.
    fn name(&self, file: u32) -> String;
    /// Whether nearby reads of one file are better fetched as one. `None` (local files, memory):
    /// every extent reads its own bytes, since a `pread` costs a system call and merging would
    /// copy bytes twice. A source whose every read costs a round trip (object storage) says
    /// how far apart two reads may be and how long one merged read may grow; the executor then
    /// fetches each group of extents with one read (`exec::coalesce`).
    fn coalesce(&self) -> Option<Coalesce> {
        None
    }
    /// Reads several `(file, offset, len)` ranges, each result in its range's place. A source
    /// whose reads are round trips (object storage) has them in flight together; others read
    /// them one after another.
    fn read_ranges(&self, ranges: &[(u32, u64, usize)]) -> Vec<Result<bytes::Bytes>> {
        ranges
            .iter()
            .map(|&(file, offset, len)| {
                let mut buf = vec![0u8; len];
                self.read_at(file, offset, &mut buf).map(|()| buf.into())
            })
            .collect()
    }
    /// Checks that the files are still those the reader opened, once a batch has read all it
    /// reads: a file rewritten in place (same inode, same length) would otherwise give
    /// another file's bytes against this one's metadata. `Ok` where nothing can change
    /// (memory) or every read checks already (files opened per read, object storage).
    fn verify(&self) -> Result<()> {
        Ok(())
    }
}

/// How a [`Source`] wants reads merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coalesce {
    /// Two reads of one file at most this many bytes apart are fetched as one, the bytes
    /// between them read and dropped.
    pub gap: u64,
    /// A merged read grows to at most this many bytes (one read longer than this on its own
    /// is still one read).
    pub max_len: u64,
}

/// Opens `path` for reading if it is a regular file, the one way every entry point opens a
/// file. The open itself never blocks: a FIFO (or a device) opened plainly would wait for a
/// writer forever, beyond Ctrl-C's reach; here it is opened with `O_NONBLOCK`, found not to
/// be a regular file by `fstat`, and refused (a directory as `IsADirectory`).
pub fn open_regular(path: &Path) -> Result<File> {
    let location = || path.display().to_string();
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| Error::io(location(), e))?;
    let meta = file.metadata().map_err(|e| Error::io(location(), e))?;
    if meta.is_dir() {
        return Err(Error::io(
            location(),
            io::Error::from(io::ErrorKind::IsADirectory),
        ));
    }
    if !meta.is_file() {
        return Err(Error::new(
            ErrorKind::Io,
            location(),
            format!("not a regular file (a {})", file_kind(&meta)),
        ));
    }
    // Regular files ignore O_NONBLOCK; cleared anyway so the descriptor behaves as usual.
    let fd = file.as_raw_fd();
    // SAFETY: `fd` is this open file's descriptor; F_GETFL/F_SETFL only read and set flags.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
    Ok(file)
}

/// Reads a whole regular file (see [`open_regular`]); used by the binding.
#[cfg_attr(not(feature = "python"), allow(dead_code))]
pub fn read_whole(path: &Path) -> Result<Vec<u8>> {
    let mut file = open_regular(path)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| Error::io(path.display().to_string(), e))?;
    Ok(bytes)
}

fn file_kind(meta: &Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_fifo() {
        "FIFO"
    } else if t.is_socket() {
        "socket"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else {
        "special file"
    }
}

/// What identifies a file's content as the reader saw it: a file replaced (new inode),
/// rewritten (new mtime) or truncated (new length) since no longer matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    /// The file's length in bytes when the stamp was taken.
    pub len: u64,
    dev: u64,
    ino: u64,
    mtime_ns: i128,
}

impl FileStamp {
    /// The stamp of the file `meta` describes (take `meta` from the open descriptor, so the
    /// stamp is of the file actually read).
    pub fn of(meta: &Metadata) -> FileStamp {
        FileStamp {
            len: meta.len(),
            dev: meta.dev(),
            ino: meta.ino(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        }
    }
}

/// Many files, one sample each (a folder of `.npy`, a list of `.npz`). Each read opens the
/// file afresh: holding tens of thousands of descriptors open would exhaust the process limit,
/// and an `open` costs little next to reading a sample. The file's [`FileStamp`] from when the
/// reader parsed it is checked, so a file replaced or rewritten since is an error, not garbage.
pub struct PathSet {
    paths: Vec<PathBuf>,
    stamps: Vec<FileStamp>,
}

impl PathSet {
    /// File `i` is `paths[i]`, which must still match `stamps[i]` when read. Panics if the
    /// two differ in length.
    pub fn new(paths: Vec<PathBuf>, stamps: Vec<FileStamp>) -> PathSet {
        assert_eq!(paths.len(), stamps.len());
        PathSet { paths, stamps }
    }

    /// The files, indexed by file number.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// What file `i` was when the set was made (its length among others).
    pub fn stamp(&self, i: usize) -> FileStamp {
        self.stamps[i]
    }
}

impl Source for PathSet {
    fn read_at(&self, file: u32, offset: u64, buf: &mut [u8]) -> Result<()> {
        let i = file as usize;
        read_stamped(&self.paths[i], self.stamps[i], offset, buf)
    }

    fn name(&self, file: u32) -> String {
        self.paths[file as usize].display().to_string()
    }
}

/// Opens `path`, checks it still matches `was`, and reads `buf` at `offset`.
pub fn read_stamped(
    path: &std::path::Path,
    was: FileStamp,
    offset: u64,
    buf: &mut [u8],
) -> Result<()> {
    let name = || path.display().to_string();
    let f = open_regular(path).map_err(|e| match e.kind() {
        // It was a regular file when the reader opened it.
        ErrorKind::Io if e.io_kind().is_none() => changed(name(), "it is no longer a regular file"),
        _ => e,
    })?;
    let meta = f.metadata().map_err(|e| Error::io(name(), e))?;
    check_stamp(&name(), was, &meta)?;
    read_exact_at(&f, offset, buf).map_err(|e| Error::io(name(), e))
}

/// `Ok` if the file `meta` describes is still the one stamped `was`, else the `Changed`
/// error saying how it changed.
fn check_stamp(name: &str, was: FileStamp, meta: &Metadata) -> Result<()> {
    if meta.is_file() && FileStamp::of(meta) == was {
        return Ok(());
    }
    let how = if !meta.is_file() {
        "it is no longer a regular file".to_string()
    } else if meta.len() != was.len {
        format!("it was {} bytes, now {}", was.len, meta.len())
    } else {
        "it was replaced or rewritten".to_string()
    };
    Err(changed(name.to_string(), &how))
}

fn changed(name: String, how: &str) -> Error {
    Error::new(
        ErrorKind::Changed,
        name,
        format!("file changed since the reader opened it ({how}); open a new reader"),
    )
}

/// `pread` until `buf` is full; running into the end of the file is `UnexpectedEof`.
pub fn read_exact_at(f: &File, offset: u64, buf: &mut [u8]) -> io::Result<()> {
    f.read_exact_at(buf, offset).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "file ends before byte {} (it was truncated or replaced)",
                    offset + buf.len() as u64
                ),
            )
        } else {
            e
        }
    })
}

/// One file read by many threads (a ZIP archive, an HDF5 file) through a single descriptor.
/// `pread` keeps no cursor, so the descriptor is shared by threads and stays valid in forked
/// children, which inherit it; a reader pickled for `spawn` opens the path again.
pub struct SharedFile {
    path: PathBuf,
    file: File,
    stamp: FileStamp,
}

impl SharedFile {
    /// Opens `path` (a regular file, see [`open_regular`]) and stamps it: a read past the
    /// length it had then is a `Changed` error.
    pub fn open(path: PathBuf) -> Result<SharedFile> {
        let location = path.display().to_string();
        let file = open_regular(&path)?;
        let meta = file.metadata().map_err(|e| Error::io(&location, e))?;
        Ok(SharedFile {
            path,
            file,
            stamp: FileStamp::of(&meta),
        })
    }

    /// The path the file was opened by (named in error messages).
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Length of the file when it was opened.
    pub fn len(&self) -> u64 {
        self.stamp.len
    }

    /// Whether the file was empty when it was opened.
    pub fn is_empty(&self) -> bool {
        self.stamp.len == 0
    }

    /// The open descriptor every read of this file goes through.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The file's stamp when it was opened.
    pub fn stamp(&self) -> FileStamp {
        self.stamp
    }
}

impl Source for SharedFile {
    fn read_at(&self, _file: u32, offset: u64, buf: &mut [u8]) -> Result<()> {
        let end = offset.checked_add(buf.len() as u64);
        if end.is_none_or(|end| end > self.stamp.len) {
            return Err(Error::new(
                ErrorKind::Changed,
                self.name(0),
                format!(
                    "read of {} bytes at offset {offset} runs past the end of the {}-byte file",
                    buf.len(),
                    self.stamp.len
                ),
            ));
        }
        read_exact_at(&self.file, offset, buf).map_err(|e| Error::io(self.name(0), e))
    }

    fn name(&self, _file: u32) -> String {
        self.path.display().to_string()
    }

    /// The open descriptor's file against its stamp: rewritten in place since (a new
    /// modification time, or length) is `Changed`.
    fn verify(&self) -> Result<()> {
        let meta = self
            .file
            .metadata()
            .map_err(|e| Error::io(self.name(0), e))?;
        check_stamp(&self.name(0), self.stamp, &meta)
    }
}

/// One file read by offset, on local disk or in object storage: what a ZIP archive is read
/// from.
pub enum FileSource {
    /// A local file.
    Local(SharedFile),
    /// An object fetched by ranged requests.
    Remote(std::sync::Arc<crate::remote::RemoteFile>),
}

impl FileSource {
    /// The file's length when it was opened.
    pub fn len(&self) -> u64 {
        match self {
            FileSource::Local(f) => f.len(),
            FileSource::Remote(r) => r.len(),
        }
    }

    /// Whether the file was empty when it was opened.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its path or URL, as messages name it.
    pub fn location(&self) -> String {
        self.name(0)
    }
}

impl Source for FileSource {
    fn read_at(&self, file: u32, offset: u64, buf: &mut [u8]) -> Result<()> {
        match self {
            FileSource::Local(f) => f.read_at(file, offset, buf),
            FileSource::Remote(r) => r.read_at(file, offset, buf),
        }
    }

    fn name(&self, file: u32) -> String {
        match self {
            FileSource::Local(f) => f.name(file),
            FileSource::Remote(r) => r.name(file),
        }
    }

    fn coalesce(&self) -> Option<Coalesce> {
        match self {
            FileSource::Local(f) => f.coalesce(),
            FileSource::Remote(r) => r.coalesce(),
        }
    }

    fn read_ranges(&self, ranges: &[(u32, u64, usize)]) -> Vec<Result<bytes::Bytes>> {
        match self {
            FileSource::Local(f) => f.read_ranges(ranges),
            FileSource::Remote(r) => r.read_ranges(ranges),
        }
    }

    fn verify(&self) -> Result<()> {
        match self {
            FileSource::Local(f) => f.verify(),
            FileSource::Remote(r) => r.verify(),
        }
    }
}

/// A [`crate::remote::RemoteFile`]'s metadata as a `Read + Seek` stream, for parsers written
/// against one (the ZIP directory reader); reads go through
/// [`crate::remote::RemoteFile::read_meta`], so they come from cached blocks or the index
/// cache.
pub struct MetaReader<'a> {
    file: &'a crate::remote::RemoteFile,
    pos: u64,
}

impl<'a> MetaReader<'a> {
    /// A stream over `file` from its first byte.
    pub fn new(file: &'a crate::remote::RemoteFile) -> MetaReader<'a> {
        MetaReader { file, pos: 0 }
    }
}

impl Read for MetaReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.file.len().saturating_sub(self.pos);
        let n = (buf.len() as u64).min(left) as usize;
        self.file
            .read_meta(self.pos, &mut buf[..n])
            .map_err(|e| io::Error::other(e.to_string()))?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl std::io::Seek for MetaReader<'_> {
    fn seek(&mut self, to: std::io::SeekFrom) -> io::Result<u64> {
        let pos = match to {
            std::io::SeekFrom::Start(p) => Some(p),
            std::io::SeekFrom::End(d) => self.file.len().checked_add_signed(d),
            std::io::SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = pos.ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        Ok(self.pos)
    }
}

/// Bytes already in memory (an archive passed as `bytes`).
pub struct MemorySource<'a> {
    /// How the bytes are named in error messages (`<buffer>` for Python `bytes`).
    pub name: &'a str,
    /// The whole content; it is the only file, whatever file number a read names.
    pub bytes: &'a [u8],
}

impl Source for MemorySource<'_> {
    fn read_at(&self, _file: u32, offset: u64, buf: &mut [u8]) -> Result<()> {
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let src = start
            .checked_add(buf.len())
            .and_then(|end| self.bytes.get(start..end))
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::BadZip,
                    self.name,
                    format!(
                        "{} bytes at offset {offset} run past the end of the data",
                        buf.len()
                    ),
                )
            })?;
        buf.copy_from_slice(src);
        Ok(())
    }

    fn name(&self, _file: u32) -> String {
        self.name.to_string()
    }
}
