//! A reader's options, from the one dict the Python package builds of them (checked and
//! defaulted there), extracted here by name into the core's [`Options`]. Every constructor
//! that opens a file takes this one object, never a list of positional parameters.

use std::path::PathBuf;

use pyo3::conversion::FromPyObjectOwned;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::errors::invalid_argument;
use crate::codec::image::geometry::{Crop, Element, ImageSpec, Layout};
use crate::codec::image::{Limits as PixelLimits, Mode};
use crate::dtype::literal;
use crate::dtype::DType;
use crate::formats::image::clip::{ClipSpec, Sampling, Short};
use crate::formats::image::videos::{ClipOptions, Episodes};
use crate::formats::image::{ImageOptions, Labels};
use crate::formats::keyed::{FieldSpec, KeyedOptions, Kind};
use crate::formats::npy;
use crate::formats::zip::{Members, ZipLimits};
use crate::open::{Format, Hdf5Options, KeyedFormat, Options, Remote, ZipSampleOptions};
use crate::remote::{Caches, StoreOptions};

/// The options dict, read by name.
pub(super) struct Dict<'py> {
    py: Python<'py>,
    dict: Bound<'py, PyDict>,
}

impl<'py> Dict<'py> {
    pub(super) fn new(obj: &Bound<'py, PyAny>) -> PyResult<Dict<'py>> {
        let dict = obj
            .cast::<PyDict>()
            .map_err(|_| invalid_argument(obj.py(), "reader options are a dict"))?
            .clone();
        Ok(Dict { py: obj.py(), dict })
    }

    /// The option `key`, or `default` when it is absent or `None`.
    pub(super) fn get<T: FromPyObjectOwned<'py>>(&self, key: &str, default: T) -> PyResult<T> {
        Ok(self.opt(key)?.unwrap_or(default))
    }

    /// The option `key`, `None` when absent or `None`.
    pub(super) fn opt<T: FromPyObjectOwned<'py>>(&self, key: &str) -> PyResult<Option<T>> {
        match self.dict.get_item(key)? {
            Some(v) if !v.is_none() => v.extract::<T>().map(Some).map_err(|e| {
                let e: PyErr = e.into();
                invalid_argument(self.py, format!("option {key}: {}", e.value(self.py)))
            }),
            _ => Ok(None),
        }
    }
}

/// Archive limits: `verify_crc`, `max_member_bytes`, `max_header_size`.
pub(super) fn zip_limits(d: &Dict<'_>) -> PyResult<ZipLimits> {
    let base = ZipLimits::default();
    Ok(ZipLimits {
        verify_crc: d.get("verify_crc", true)?,
        max_member_bytes: d.get("max_member_bytes", base.max_member_bytes)?,
        npy: npy::Limits {
            max_header_bytes: d.get("max_header_size", npy::DEFAULT_MAX_HEADER_BYTES)?,
        },
        ..base
    })
}

/// How objects are opened: `storage_options` (pairs of strings), `index_cache` (a folder or
/// `None`), `data_cache` (`(folder, bytes)` or `None`).
pub(super) fn remote(d: &Dict<'_>) -> PyResult<Remote> {
    Ok(Remote {
        store: StoreOptions(d.get("storage_options", Vec::new())?),
        caches: Caches {
            index: d.opt::<PathBuf>("index_cache")?,
            data: d.opt::<(PathBuf, u64)>("data_cache")?,
        },
    })
}

/// Which members: `None`, a pattern, or a list of names.
fn members(d: &Dict<'_>) -> PyResult<Members> {
    let pattern = d
        .dict
        .get_item("members")?
        .is_some_and(|v| v.is_instance_of::<pyo3::types::PyString>());
    if pattern {
        return Ok(d
            .opt::<String>("members")?
            .map_or(Members::All, Members::Pattern));
    }
    Ok(match d.opt::<Vec<String>>("members")? {
        Some(names) => Members::Names(names),
        None => Members::All,
    })
}

/// A dtype given as the repr of its numpy descr (`'<f4'`, `[('a', '<i2')]`).
fn dtype(d: &Dict<'_>, key: &str) -> PyResult<Option<DType>> {
    let Some(text) = d.opt::<String>(key)? else {
        return Ok(None);
    };
    let descr = literal::parse(&text).map_err(|e| invalid_argument(d.py, format!("{key}: {e}")))?;
    DType::from_descr(descr)
        .map(Some)
        .map_err(|e| invalid_argument(d.py, format!("{key} {text}: {e:?}")))
}

/// The HDF5 options: `datasets`, `cache_bytes`, `in_memory`.
pub(super) fn hdf5(d: &Dict<'_>) -> PyResult<Hdf5Options> {
    Ok(Hdf5Options {
        datasets: d.opt("datasets")?,
        cache_bytes: d.get("cache_bytes", crate::formats::hdf5::DEFAULT_CACHE_BYTES)?,
        in_memory: d.get("in_memory", false)?,
    })
}

/// Which members are samples and as what: `members`, `dtype`, `shape`.
pub(super) fn zip_samples(d: &Dict<'_>) -> PyResult<ZipSampleOptions> {
    Ok(ZipSampleOptions {
        members: members(d)?,
        dtype: dtype(d, "dtype")?,
        shape: d.opt("shape")?,
        reference: d.opt("reference")?,
    })
}

/// The images' options: their geometry (`size`, `crop`, `resize`, `scale`, `ratio`, `flip`,
/// `layout`, `mode`, `normalize`, `exif_transpose`, `draft`, `max_pixels`), `augment_seed`,
/// `on_error`, `members`, `labels` and the HDF5 `images` dataset.
pub(super) fn images(d: &Dict<'_>) -> PyResult<ImageOptions> {
    let py = d.py;
    let size: Option<(u32, u32)> = d.opt("size")?;
    let mode_name: String = d.get("mode", "RGB".to_string())?;
    let mode = Mode::parse(&mode_name)
        .ok_or_else(|| invalid_argument(py, format!("mode {mode_name:?}")))?;
    let resize: u32 = d.get("resize", size.map_or(1, |(h, w)| h.max(w)))?;
    let crop_name: String = d.get("crop", "center".to_string())?;
    let crop = match (crop_name.as_str(), size) {
        (_, None) => Crop::Full,
        ("center", _) => Crop::Center { resize },
        ("random", _) => Crop::Random {
            scale: d.get("scale", (0.08, 1.0))?,
            ratio: d.get("ratio", (0.75, 4.0 / 3.0))?,
        },
        (other, _) => return Err(invalid_argument(py, format!("crop {other:?}"))),
    };
    let layout = match d.get("layout", "NHWC".to_string())?.as_str() {
        "NHWC" => Layout::Nhwc,
        "NCHW" => Layout::Nchw,
        other => return Err(invalid_argument(py, format!("layout {other:?}"))),
    };
    let (element, mean, std) = match d.opt::<(Vec<f32>, Vec<f32>, String)>("normalize")? {
        None => (Element::U8, vec![], vec![]),
        Some((mean, std, dtype)) => {
            let element = match dtype.as_str() {
                "float32" => Element::F32,
                "float16" => Element::F16,
                other => return Err(invalid_argument(py, format!("dtype {other:?}"))),
            };
            if mean.len() != mode.channels() || std.len() != mode.channels() {
                return Err(invalid_argument(py, "one mean and std per channel"));
            }
            (element, mean, std)
        }
    };
    // Images at their own sizes: each sample's spec gets its size when it is read.
    let size = size.unwrap_or((1, 1));
    if size.0 == 0 || size.1 == 0 || resize == 0 {
        return Err(invalid_argument(py, "sizes must be positive"));
    }
    let labels = match d.dict.get_item("labels")? {
        None => Labels::Auto,
        Some(v) if v.is_none() => Labels::Auto,
        Some(v) => match v.extract::<bool>() {
            Ok(false) => Labels::Off,
            Ok(true) => Labels::Auto,
            Err(_) => Labels::Named(v.extract().map_err(|_| {
                invalid_argument(py, "labels must be a member or dataset name, or False")
            })?),
        },
    };
    let on_error: String = d.get("on_error", "raise".to_string())?;
    Ok(ImageOptions {
        spec: ImageSpec {
            size,
            crop,
            flip: d.get("flip", false)?,
            layout,
            mode,
            element,
            mean,
            std,
            exif_transpose: d.get("exif_transpose", false)?,
            draft: d.get("draft", false)?,
            limits: PixelLimits {
                max_pixels: d.get("max_pixels", crate::codec::image::DEFAULT_MAX_PIXELS)?,
            },
        },
        seed: d.get::<u64>("augment_seed", 0)?,
        skip: on_error == "skip",
        members: members(d)?,
        labels,
        dataset: d.opt("images")?,
        threads: d.opt("num_threads")?,
    })
}

/// The clips' options: the images' (how each frame is decoded), `clip_len`, `frame_step`,
/// `sampling` (`"random"`, `"uniform"`, `"segments"`, `"segments-center"`, `"windows"`),
/// `clips_per_video`, `stride`, `short` (`"repeat_last"`, `"error"`, `"skip"`) and `videos`
/// (a list file).
pub(super) fn clips(d: &Dict<'_>) -> PyResult<ClipOptions> {
    let py = d.py;
    let positive = |key: &str| -> PyResult<usize> {
        let v: usize = d.get(key, 1)?;
        if v == 0 {
            return Err(invalid_argument(py, format!("{key} must be at least 1")));
        }
        Ok(v)
    };
    let sampling = match d.get("sampling", "random".to_string())?.as_str() {
        "random" => Sampling::Random,
        "uniform" => Sampling::Uniform {
            clips: positive("clips_per_video")?,
        },
        "segments" => Sampling::Segments { random: true },
        "segments-center" => Sampling::Segments { random: false },
        "windows" => Sampling::Windows {
            stride: positive("stride")?,
        },
        other => return Err(invalid_argument(py, format!("sampling {other:?}"))),
    };
    let short = match d.get("short", "repeat_last".to_string())?.as_str() {
        "repeat_last" => Short::RepeatLast,
        "error" => Short::Error,
        "skip" => Short::Skip,
        other => return Err(invalid_argument(py, format!("short {other:?}"))),
    };
    Ok(ClipOptions {
        images: images(d)?,
        clip: ClipSpec {
            len: positive("clip_len")?,
            step: positive("frame_step")?,
            sampling,
            short,
            reach: None,
        },
        list: d.opt("videos")?,
        datasets: d.opt("datasets")?,
        episodes: match d.dict.get_item("episodes")? {
            Some(v) if v.is_none() => None,
            None => None,
            Some(v) => Some(match v.extract::<String>() {
                Ok(name) => Episodes::Dataset(name),
                Err(_) => Episodes::Values(v.extract().map_err(|_| {
                    invalid_argument(py, "episodes must be a dataset's name or a list of ints")
                })?),
            }),
        },
        offsets: d.get("offsets", Vec::new())?,
        cache_bytes: d.get("cache_bytes", crate::formats::hdf5::DEFAULT_CACHE_BYTES)?,
    })
}

/// Keyed samples' options: `fields` (`[(batch key, [field names])]`, or `None` for the first
/// sample's), `kinds` (`[(batch key, kind)]`), `on_missing` (`"raise"`, `"skip"`), and the
/// images' options for image fields.
pub(super) fn keyed(d: &Dict<'_>, tar: bool) -> PyResult<KeyedFormat> {
    let py = d.py;
    let fields = d.opt::<Vec<(String, Vec<String>)>>("fields")?.map(|given| {
        given
            .into_iter()
            .map(|(key, names)| FieldSpec {
                key,
                names,
                kind: None,
            })
            .collect()
    });
    let skip_missing = match d.get("on_missing", "raise".to_string())?.as_str() {
        "raise" => false,
        "skip" => true,
        other => return Err(invalid_argument(py, format!("on_missing {other:?}"))),
    };
    let kinds = d
        .get::<Vec<(String, String)>>("kinds", Vec::new())?
        .into_iter()
        .map(|(key, k)| {
            let kind = Kind::parse(&k).ok_or_else(|| {
                invalid_argument(
                    py,
                    format!("kind {k:?} (kinds: image, int, npy, npy-ragged, json, text, bytes)"),
                )
            })?;
            Ok((key, kind))
        })
        .collect::<PyResult<Vec<_>>>()?;
    Ok(KeyedFormat {
        tar,
        options: KeyedOptions {
            fields,
            images: images(d)?,
            skip_missing,
            kinds,
        },
    })
}

/// Every option, for the format named `format` (`"hdf5"`, `"zip"`, `"images"`).
pub(super) fn options(obj: &Bound<'_, PyAny>, format: &str) -> PyResult<Options> {
    let d = Dict::new(obj)?;
    let format = match format {
        "hdf5" => Format::Hdf5(hdf5(&d)?),
        "zip" if d.opt::<Bound<'_, PyAny>>("fields")?.is_some() => Format::Keyed(keyed(&d, false)?),
        "zip" => Format::Zip(zip_samples(&d)?),
        "tar" => Format::Keyed(keyed(&d, true)?),
        "images" => Format::Images(images(&d)?),
        "clips" => Format::Clips(clips(&d)?),
        other => return Err(invalid_argument(d.py, format!("no format {other:?}"))),
    };
    let mut zip = zip_limits(&d)?;
    if matches!(
        format,
        Format::Images(_) | Format::Clips(_) | Format::Keyed(_)
    ) {
        // An image member is read whole: as large as an image file may be.
        zip.max_member_bytes = d.get(
            "max_member_bytes",
            crate::formats::image::DEFAULT_MAX_FILE_BYTES,
        )?;
    }
    Ok(Options {
        format,
        zip,
        remote: remote(&d)?,
        threads: d.opt("num_threads")?,
    })
}
