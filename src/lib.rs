//! packread: parallel reads of NPY files, ZIP/NPZ members and HDF5 chunks straight into
//! preallocated buffers. Every format is an indexer that says where a sample's bytes are and
//! how they are encoded (an [`exec::Extent`]); one executor reads and decodes them all.
//!
//! The core has no Python in it; `src/py` (feature `python`) is the binding layer.

// Every `unsafe` operation sits in its own block with a `SAFETY:` comment saying why it holds.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]

pub mod codec;
pub mod dtype;
pub mod error;
pub(crate) mod exec;
#[cfg(feature = "hdf5")]
pub mod hdf5;
pub mod literal;
pub mod npy;
pub mod npy_header;
pub mod npz;
pub mod order;
pub mod pending;
pub mod plan;
pub mod pool;
pub(crate) mod source;
pub mod zip;

#[cfg(feature = "python")]
mod py;

pub use error::{Error, ErrorKind, Result};
