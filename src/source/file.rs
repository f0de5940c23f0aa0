//! Local files. Every read is a positional `pread`: no shared file cursor, so threads and
//! forked processes never disturb each other. [`LocalFile`] keeps one descriptor (one archive,
//! one HDF5 file); [`StampedPath`] opens its file for each read (a folder of tens of thousands
//! of `.npy` samples would exhaust the descriptors otherwise, and an `open` costs little next
//! to a sample's read). Both check, with a [`FileStamp`], that the file is still the one opened.

use std::any::Any;
use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::Source;
use crate::error::{Error, ErrorKind, Result};

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

/// Reads a whole regular file (see [`open_regular`]).
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

/// A read of `len` bytes at `offset` inside a file of `file_len` bytes, or the `Changed`
/// error of one that runs past its end.
fn check_range(name: &str, offset: u64, len: usize, file_len: u64) -> Result<()> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= file_len => Ok(()),
        _ => Err(Error::new(
            ErrorKind::Changed,
            name,
            format!(
                "read of {len} bytes at offset {offset} runs past the end of the {file_len}-byte file"
            ),
        )),
    }
}

/// How a message shows `path`: as Python shows a name that is not UTF-8 once escaped
/// (`os.fsdecode`, then `backslashreplace`): each byte that is not part of valid UTF-8 as
/// `\udcXX`, the rest as it is.
pub fn shown(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::new();
    for chunk in path.as_os_str().as_bytes().utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            out.push_str(&format!("\\udc{b:02x}"));
        }
    }
    out
}

/// A path, how messages show it, and its stamp when first opened: what both file sources
/// keep.
struct Stamped {
    path: PathBuf,
    name: String,
    stamp: FileStamp,
}

impl Stamped {
    /// Opens `path` (a regular file, see [`open_regular`]) and stamps it.
    fn open(path: PathBuf) -> Result<(Stamped, File)> {
        let name = shown(&path);
        let file = open_regular(&path)?;
        let meta = file.metadata().map_err(|e| Error::io(&name, e))?;
        let stamp = FileStamp::of(&meta);
        Ok((Stamped { path, name, stamp }, file))
    }

    /// Fills `buf` from `file` at `offset`, inside the length stamped.
    fn read(&self, file: &File, offset: u64, buf: &mut [u8]) -> Result<()> {
        check_range(&self.name, offset, buf.len(), self.stamp.len)?;
        read_exact_at(file, offset, buf).map_err(|e| Error::io(&self.name, e))
    }
}

/// One file read by many threads (a ZIP archive, an HDF5 file) through a single descriptor.
/// `pread` keeps no cursor, so the descriptor is shared by threads and stays valid in forked
/// children, which inherit it; a reader pickled for `spawn` opens the path again.
pub struct LocalFile {
    at: Stamped,
    file: File,
}

impl LocalFile {
    /// Opens `path` (a regular file, see [`open_regular`]) and stamps it: a read past the
    /// length it had then, or one after it was rewritten, is a `Changed` error.
    pub fn open(path: PathBuf) -> Result<LocalFile> {
        let (at, file) = Stamped::open(path)?;
        Ok(LocalFile { at, file })
    }

    /// A regular file opened elsewhere (the descriptor of a Python file object, duplicated),
    /// named `name` in messages, and stamped now. Its [`path`](Self::path) is that name: no
    /// path to open again.
    pub fn from_open(file: File, name: String) -> Result<LocalFile> {
        let meta = file.metadata().map_err(|e| Error::io(&name, e))?;
        if !meta.is_file() {
            return Err(Error::new(
                ErrorKind::Io,
                name,
                format!("not a regular file (a {})", file_kind(&meta)),
            ));
        }
        let at = Stamped {
            path: PathBuf::from(&name),
            name,
            stamp: FileStamp::of(&meta),
        };
        Ok(LocalFile { at, file })
    }

    /// The path the file was opened by.
    pub fn path(&self) -> &Path {
        &self.at.path
    }

    /// The file's stamp when it was opened.
    pub fn stamp(&self) -> FileStamp {
        self.at.stamp
    }
}

impl Source for LocalFile {
    fn len(&self) -> u64 {
        self.at.stamp.len
    }

    fn name(&self) -> &str {
        &self.at.name
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.at.read(&self.file, offset, buf)
    }

    /// The open descriptor's file against its stamp: rewritten in place since (a new
    /// modification time, or length) is `Changed`.
    fn verify(&self) -> Result<()> {
        let meta = self
            .file
            .metadata()
            .map_err(|e| Error::io(&self.at.name, e))?;
        check_stamp(&self.at.name, self.at.stamp, &meta)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A file opened for each read, checked each time against the stamp it had when the reader
/// first opened it: a file replaced or rewritten since is an error, not garbage.
pub struct StampedPath {
    at: Stamped,
    /// The descriptor the stamp was taken from, read through until the format has opened
    /// ([`Source::opened`]): a reader of many files opens each once to open itself.
    held: Mutex<Option<File>>,
}

impl StampedPath {
    /// `path` as it is now (opened to stamp it, and kept open until [`Source::opened`]; see
    /// [`open_regular`]).
    pub fn open(path: PathBuf) -> Result<StampedPath> {
        let (at, file) = Stamped::open(path)?;
        Ok(StampedPath {
            at,
            held: Mutex::new(Some(file)),
        })
    }

    /// `path` as it is now, stamped and closed again (a set of many files that keeps none
    /// open).
    pub fn stamped(path: PathBuf) -> Result<StampedPath> {
        let file = StampedPath::open(path)?;
        file.opened();
        Ok(file)
    }

    /// `path`, which must still match `stamp` when read.
    pub fn with_stamp(path: PathBuf, stamp: FileStamp) -> StampedPath {
        let name = shown(&path);
        StampedPath {
            at: Stamped { path, name, stamp },
            held: Mutex::new(None),
        }
    }

    /// The file's stamp when it was first opened.
    pub fn stamp(&self) -> FileStamp {
        self.at.stamp
    }

    /// The path.
    pub fn path(&self) -> &Path {
        &self.at.path
    }
}

impl Source for StampedPath {
    fn len(&self) -> u64 {
        self.at.stamp.len
    }

    fn name(&self) -> &str {
        &self.at.name
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let at = &self.at;
        if let Some(file) = &*self.held.lock().unwrap_or_else(|p| p.into_inner()) {
            return at.read(file, offset, buf);
        }
        check_range(&at.name, offset, buf.len(), at.stamp.len)?;
        let f = open_regular(&at.path).map_err(|e| match e.kind() {
            // It was a regular file when the reader opened it.
            ErrorKind::Io if e.io_kind().is_none() => {
                changed(at.name.clone(), "it is no longer a regular file")
            }
            _ => e,
        })?;
        let meta = f.metadata().map_err(|e| Error::io(&at.name, e))?;
        check_stamp(&at.name, at.stamp, &meta)?;
        at.read(&f, offset, buf)
    }

    /// Lets the descriptor taken to open go: reads from now on open the file each time.
    fn opened(&self) {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
