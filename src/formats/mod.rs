//! The formats: each an [`Index`](crate::batch::Index) over its bytes, saying where a
//! sample's bytes are and how they are encoded.

#[cfg(feature = "hdf5")]
pub mod hdf5;
pub mod image;
pub mod keyed;
pub mod npy;
pub mod npz;
pub mod tar;
pub mod zip;
