//! PNG (`png` crate) and WebP (`image-webp` crate), both pure Rust and maintained by the
//! image-rs project. Their headers are read without decoding, so sizes are checked before any
//! pixel buffer exists; the decoders' own allocation limits are set to what the checked size
//! needs. What a crate was seen to panic on is checked before it sees the bytes, and a panic
//! inside either is still a `Corrupt` image, never an unwinding into the batch.

use std::io::Cursor;
use std::panic::{catch_unwind, AssertUnwindSafe};

use super::{ImageError, ImageInfo, Stored};

fn png_error(e: png::DecodingError) -> ImageError {
    match e {
        png::DecodingError::IoError(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
            ImageError::Truncated(format!("PNG: {io}"))
        }
        png::DecodingError::IoError(io) => ImageError::Truncated(format!("PNG: {io}")),
        png::DecodingError::Format(f) => ImageError::Corrupt(format!("PNG: {f}")),
        png::DecodingError::Parameter(p) => ImageError::Unsupported(format!("PNG: {p}")),
        png::DecodingError::LimitsExceeded => {
            ImageError::TooLarge("PNG: over the decoder's memory limit".into())
        }
    }
}

/// `f`, with a panic of the decoder crate it calls turned into a `Corrupt` image of `format`.
fn guarded<T>(format: &str, f: impl FnOnce() -> Result<T, ImageError>) -> Result<T, ImageError> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let why = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(ImageError::Corrupt(format!(
            "{format}: the decoder failed ({why})"
        )))
    })
}

/// The chunks before the image data that the `png` crate trusts: a PLTE whose length is not
/// 1-256 whole entries made it panic (libpng refuses such a palette too).
fn check_png_chunks(data: &[u8]) -> Result<(), ImageError> {
    let mut pos = 8usize;
    while let Some(head) = data.get(pos..pos + 8) {
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        match &head[4..8] {
            b"PLTE" if len == 0 || len % 3 != 0 || len > 768 => {
                return Err(ImageError::Corrupt(format!(
                    "PNG: a PLTE chunk of {len} bytes (a palette is 1 to 256 entries of 3 bytes)"
                )))
            }
            b"IDAT" | b"IEND" => return Ok(()),
            _ => {}
        }
        pos = pos.saturating_add(len).saturating_add(12);
    }
    Ok(())
}

/// Width and height from the IHDR chunk.
pub(super) fn png_size(data: &[u8]) -> Result<(u32, u32), ImageError> {
    guarded("PNG", || {
        let mut decoder = png::Decoder::new(Cursor::new(data));
        let info = decoder.read_header_info().map_err(png_error)?;
        Ok((info.width, info.height))
    })
}

/// The whole image with palettes, `tRNS` and bit depths below 8 expanded; 16-bit samples
/// become 8 as PIL makes them (grey clipped at 255, everything else its high byte), and a
/// 16-bit image's `tRNS` colour is compared with the 8-bit pixels, as PIL compares it (after
/// its conversion: a grey `tRNS` above 255 makes nothing transparent).
pub(super) fn decode_png(data: &[u8], info: &ImageInfo) -> Result<(Vec<u8>, Stored), ImageError> {
    check_png_chunks(data)?;
    guarded("PNG", || png_pixels(data, info))
}

fn png_pixels(data: &[u8], info: &ImageInfo) -> Result<(Vec<u8>, Stored), ImageError> {
    // Room for the largest expanded row layout (RGBA, 16 bits) of the checked size, plus the
    // decoder's own buffers.
    let budget = info.width as usize * info.height as usize * 8 + (8 << 20);
    let mut decoder =
        png::Decoder::new_with_limits(Cursor::new(data), png::Limits { bytes: budget });
    decoder.set_transformations(png::Transformations::EXPAND);
    decoder.set_ignore_text_chunk(true);
    let mut reader = decoder.read_info().map_err(png_error)?;
    // A 16-bit grey or RGB image's transparent colour, in 16-bit samples.
    let trns16: Option<Vec<u16>> = {
        let i = reader.info();
        let samples = match i.color_type {
            png::ColorType::Grayscale => 1,
            png::ColorType::Rgb => 3,
            _ => 0,
        };
        match &i.trns {
            Some(t) if i.bit_depth == png::BitDepth::Sixteen && samples > 0 => {
                if t.len() < samples * 2 {
                    return Err(ImageError::Corrupt("PNG: a tRNS chunk too short".into()));
                }
                Some(
                    t.chunks_exact(2)
                        .take(samples)
                        .map(|b| u16::from_be_bytes([b[0], b[1]]))
                        .collect(),
                )
            }
            _ => None,
        }
    };
    let size = reader
        .output_buffer_size()
        .ok_or_else(|| ImageError::TooLarge("PNG: the decoded size overflows".into()))?;
    let mut buf = vec![0u8; size];
    let out = reader.next_frame(&mut buf).map_err(png_error)?;
    if (out.width, out.height) != (info.width, info.height) {
        return Err(ImageError::Corrupt(
            "PNG: frame size differs from the header".into(),
        ));
    }
    buf.truncate(out.line_size * out.height as usize);
    let stored = match out.color_type {
        png::ColorType::Grayscale => Stored::L,
        png::ColorType::GrayscaleAlpha => Stored::La,
        png::ColorType::Rgb => Stored::Rgb,
        png::ColorType::Rgba => Stored::Rgba,
        png::ColorType::Indexed => {
            return Err(ImageError::Corrupt("PNG: palette not expanded".into()))
        }
    };
    let row_len = info.width as usize * stored_channels(stored);
    let pixels = if out.bit_depth == png::BitDepth::Sixteen {
        let mut px = Vec::with_capacity(row_len * info.height as usize);
        for row in buf.chunks_exact(out.line_size) {
            let samples = row[..row_len * 2].chunks_exact(2);
            match (&trns16, stored) {
                // Grey with tRNS (expanded to grey + alpha): PIL clips the grey to 8 bits,
                // then makes transparent what equals the tRNS value.
                (Some(t), Stored::La) => {
                    for s in samples.step_by(2) {
                        let v = u16::from_be_bytes([s[0], s[1]]).min(255);
                        px.extend([v as u8, if v == t[0] { 0 } else { 255 }]);
                    }
                }
                // RGB with tRNS (expanded to RGBA): high bytes, then the same comparison.
                (Some(t), Stored::Rgba) => {
                    let samples: Vec<&[u8]> = samples.collect();
                    for p in samples.chunks_exact(4) {
                        let rgb = [p[0][0], p[1][0], p[2][0]];
                        let clear = rgb.iter().zip(t).all(|(&c, &w)| c as u16 == w);
                        px.extend(rgb);
                        px.push(if clear { 0 } else { 255 });
                    }
                }
                // PIL opens 16-bit grey as `I;16` and converts to L by clipping; other 16-bit
                // modes it unpacks to their high byte.
                (_, Stored::L) => {
                    px.extend(samples.map(|s| u16::from_be_bytes([s[0], s[1]]).min(255) as u8))
                }
                _ => px.extend(samples.map(|s| s[0])),
            }
        }
        px
    } else {
        let mut px = Vec::with_capacity(row_len * info.height as usize);
        for row in buf.chunks_exact(out.line_size) {
            px.extend_from_slice(&row[..row_len]);
        }
        px
    };
    Ok((pixels, stored))
}

fn stored_channels(s: Stored) -> usize {
    match s {
        Stored::L => 1,
        Stored::La => 2,
        Stored::Rgb => 3,
        Stored::Rgba | Stored::CmykInverted => 4,
    }
}

/// The raw EXIF block of a PNG (`eXIf` chunk), if any.
pub(super) fn png_exif(data: &[u8]) -> Option<Vec<u8>> {
    check_png_chunks(data).ok()?;
    guarded("PNG", || {
        let mut decoder = png::Decoder::new(Cursor::new(data));
        decoder.set_ignore_text_chunk(true);
        let reader = decoder.read_info().map_err(png_error)?;
        Ok(reader.info().exif_metadata.as_ref().map(|e| e.to_vec()))
    })
    .ok()
    .flatten()
}

fn webp_error(e: image_webp::DecodingError) -> ImageError {
    use image_webp::DecodingError as E;
    match e {
        E::IoError(io) => ImageError::Truncated(format!("WebP: {io}")),
        E::MemoryLimitExceeded => ImageError::TooLarge("WebP: over the memory limit".into()),
        E::UnsupportedFeature(f) => ImageError::Unsupported(format!("WebP: {f}")),
        other => ImageError::Corrupt(format!("WebP: {other}")),
    }
}

fn webp_decoder(data: &[u8]) -> Result<image_webp::WebPDecoder<Cursor<&[u8]>>, ImageError> {
    image_webp::WebPDecoder::new(Cursor::new(data)).map_err(webp_error)
}

/// Width and height from the WebP header.
pub(super) fn webp_size(data: &[u8]) -> Result<(u32, u32), ImageError> {
    guarded("WebP", || Ok(webp_decoder(data)?.dimensions()))
}

/// The whole image (the first frame of an animation), RGB or RGBA as PIL opens it.
pub(super) fn decode_webp(data: &[u8], info: &ImageInfo) -> Result<(Vec<u8>, Stored), ImageError> {
    guarded("WebP", || webp_pixels(data, info))
}

fn webp_pixels(data: &[u8], info: &ImageInfo) -> Result<(Vec<u8>, Stored), ImageError> {
    let mut decoder = webp_decoder(data)?;
    if decoder.dimensions() != (info.width, info.height) {
        return Err(ImageError::Corrupt("WebP: the header changed".into()));
    }
    decoder.set_memory_limit(info.width as usize * info.height as usize * 8 + (8 << 20));
    let size = decoder
        .output_buffer_size()
        .ok_or_else(|| ImageError::TooLarge("WebP: the decoded size overflows".into()))?;
    let stored = if decoder.has_alpha() {
        Stored::Rgba
    } else {
        Stored::Rgb
    };
    let mut buf = vec![0u8; size];
    if decoder.is_animated() {
        decoder.read_frame(&mut buf).map_err(webp_error)?;
    } else {
        decoder.read_image(&mut buf).map_err(webp_error)?;
    }
    Ok((buf, stored))
}

/// The raw EXIF block of a WebP (`EXIF` chunk), if any.
pub(super) fn webp_exif(data: &[u8]) -> Option<Vec<u8>> {
    guarded("WebP", || {
        Ok(webp_decoder(data)?.exif_metadata().ok().flatten())
    })
    .ok()
    .flatten()
}
