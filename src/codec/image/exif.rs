//! The EXIF orientation tag (0x0112) and PIL's `ImageOps.exif_transpose` of it. Only IFD0's
//! orientation is read, with every offset checked against the block: a few dozen lines, where
//! an EXIF crate would parse (and allocate for) every tag of every image.

use super::png_webp::{png_exif, webp_exif};
use super::{ImageFormat, Picture};

/// The orientation an image's EXIF data gives (1-8), 1 when there is none or it is damaged.
pub fn orientation(data: &[u8], format: ImageFormat) -> u16 {
    let block = match format {
        ImageFormat::Jpeg => jpeg_exif(data).map(<[u8]>::to_vec),
        ImageFormat::Png => png_exif(data),
        ImageFormat::Webp => webp_exif(data),
    };
    block
        .and_then(|b| {
            // A JPEG APP1 block and (often) a WebP EXIF chunk start with "Exif\0\0".
            let tiff = b.strip_prefix(b"Exif\0\0").unwrap_or(&b);
            tiff_orientation(tiff)
        })
        .filter(|o| (1..=8).contains(o))
        .unwrap_or(1)
}

/// The APP1 "Exif" segment of a JPEG, found by walking its markers up to the first scan.
fn jpeg_exif(data: &[u8]) -> Option<&[u8]> {
    let mut at = 2; // after SOI
    while at + 4 <= data.len() {
        if data[at] != 0xFF {
            return None;
        }
        let marker = data[at + 1];
        if marker == 0xFF {
            at += 1; // fill byte
            continue;
        }
        if marker == 0xDA || marker == 0xD9 {
            return None; // start of scan, end of image: no EXIF before the data
        }
        let len = u16::from_be_bytes([data[at + 2], data[at + 3]]) as usize;
        if len < 2 || at + 2 + len > data.len() {
            return None;
        }
        let body = &data[at + 4..at + 2 + len];
        if marker == 0xE1 && body.starts_with(b"Exif\0\0") {
            return Some(body);
        }
        at += 2 + len;
    }
    None
}

fn tiff_orientation(t: &[u8]) -> Option<u16> {
    let big = match t.get(..4)? {
        [b'I', b'I', 42, 0] => false,
        [b'M', b'M', 0, 42] => true,
        _ => return None,
    };
    let u16_at = |at: usize| -> Option<u16> {
        let b = t.get(at..at.checked_add(2)?)?;
        Some(if big {
            u16::from_be_bytes([b[0], b[1]])
        } else {
            u16::from_le_bytes([b[0], b[1]])
        })
    };
    let u32_at = |at: usize| -> Option<u32> {
        let b = t.get(at..at.checked_add(4)?)?;
        let a = [b[0], b[1], b[2], b[3]];
        Some(if big {
            u32::from_be_bytes(a)
        } else {
            u32::from_le_bytes(a)
        })
    };
    let ifd = u32_at(4)? as usize;
    let count = u16_at(ifd)? as usize;
    for k in 0..count.min(512) {
        let entry = ifd.checked_add(2 + 12 * k)?;
        if u16_at(entry)? == 0x0112 && u16_at(entry + 2)? == 3 {
            return u16_at(entry + 8);
        }
    }
    None
}

/// `pic` turned upright as EXIF `orientation` says, as PIL's `exif_transpose` does it.
pub fn transpose(pic: &Picture, orientation: u16) -> Picture {
    let (w, h) = (pic.width as usize, pic.height as usize);
    let swap = matches!(orientation, 5..=8);
    let (ow, oh) = if swap { (h, w) } else { (w, h) };
    let c = pic.mode.channels();
    let mut pixels = vec![0u8; ow * oh * c];
    for y in 0..oh {
        for x in 0..ow {
            // The source pixel of output (x, y), per PIL's transposition for each orientation.
            let (sx, sy) = match orientation {
                2 => (w - 1 - x, y),         // FLIP_LEFT_RIGHT
                3 => (w - 1 - x, h - 1 - y), // ROTATE_180
                4 => (x, h - 1 - y),         // FLIP_TOP_BOTTOM
                5 => (y, x),                 // TRANSPOSE
                6 => (y, h - 1 - x),         // ROTATE_270
                7 => (w - 1 - y, h - 1 - x), // TRANSVERSE
                8 => (w - 1 - y, x),         // ROTATE_90
                _ => (x, y),
            };
            let from = (sy * w + sx) * c;
            let to = (y * ow + x) * c;
            pixels[to..to + c].copy_from_slice(&pic.pixels[from..from + c]);
        }
    }
    Picture {
        width: ow as u32,
        height: oh as u32,
        mode: pic.mode,
        pixels,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::image::Mode;

    #[test]
    fn orientation_is_read_from_either_byte_order() {
        let mut le = b"II*\0\x08\0\0\0\x01\0".to_vec();
        le.extend_from_slice(&[0x12, 0x01, 3, 0, 1, 0, 0, 0, 6, 0, 0, 0]);
        assert_eq!(tiff_orientation(&le), Some(6));
        let mut be = b"MM\0*\0\0\0\x08\0\x01".to_vec();
        be.extend_from_slice(&[0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 8, 0, 0]);
        assert_eq!(tiff_orientation(&be), Some(8));
        assert_eq!(tiff_orientation(&le[..12]), None); // cut inside the entry
    }

    #[test]
    fn rotations_move_pixels_as_pil_does() {
        // 2x1 image [a b]: ROTATE_270 (orientation 6, clockwise) gives a 1x2 image [a; b].
        let pic = Picture {
            width: 2,
            height: 1,
            mode: Mode::L,
            pixels: vec![1, 2],
        };
        let cw = transpose(&pic, 6);
        assert_eq!((cw.width, cw.height, cw.pixels.clone()), (1, 2, vec![1, 2]));
        let ccw = transpose(&pic, 8);
        assert_eq!((ccw.width, ccw.height, ccw.pixels), (1, 2, vec![2, 1]));
        assert_eq!(transpose(&pic, 2).pixels, vec![2, 1]);
    }
}
