//! Bytes already in memory: a file read whole (`in_memory=True`), or the binding's view of a
//! Python buffer (`bytes`, `bytearray`, `memoryview`, a numpy array), read in place.

use std::any::Any;
use std::sync::Arc;

use super::Source;
use crate::error::{Error, ErrorKind, Result};

/// A whole file's bytes, held by `owner`, read in place: parsers read them through
/// [`Source::bytes`], batches by copies.
pub struct Memory {
    name: String,
    owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
}

impl Memory {
    /// The bytes `owner` holds, named `name` in messages (`<bytes>`, a path read whole).
    pub fn new(name: impl Into<String>, owner: Arc<dyn AsRef<[u8]> + Send + Sync>) -> Memory {
        Memory {
            name: name.into(),
            owner,
        }
    }

    /// `bytes`, owned.
    pub fn from_vec(name: impl Into<String>, bytes: Vec<u8>) -> Memory {
        Memory::new(name, Arc::new(bytes))
    }

    fn all(&self) -> &[u8] {
        (*self.owner).as_ref()
    }
}

impl Source for Memory {
    fn len(&self) -> u64 {
        self.all().len() as u64
    }

    fn name(&self) -> &str {
        &self.name
    }

    /// A read past the end is the data's fault (a format's offsets point beyond it): the
    /// format reports it as its own kind of damage (see `Error::past_end`).
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let all = self.all();
        let src = usize::try_from(offset)
            .ok()
            .and_then(|start| all.get(start..start.checked_add(buf.len())?))
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::PastEnd,
                    &self.name,
                    format!(
                        "{} bytes at offset {offset} run past the end of the {}-byte data",
                        buf.len(),
                        all.len()
                    ),
                )
            })?;
        buf.copy_from_slice(src);
        Ok(())
    }

    fn bytes(&self) -> Option<&[u8]> {
        Some(self.all())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
