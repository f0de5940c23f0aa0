/* One JPEG decode through libjpeg's own API, in libjpeg-turbo: the library TurboJPEG wraps and
 * PIL calls the same way. Written here, rather than through TurboJPEG's API, because that API
 * cannot give what a reader of untrusted images needs (each point was a silent wrong result):
 *
 *  - A fresh decompressor for every call. A TurboJPEG handle keeps one decompressor, and
 *    libjpeg keeps Huffman and quantization tables across images (for abbreviated streams),
 *    so a JPEG without DHT decoded with the previous image's tables, and a header that failed
 *    left the marker reader mid-stream for the next image ("two SOI markers").
 *  - A fatal error is told from a warning per call: TurboJPEG's error code stays WARNING once
 *    a warning was seen, even when a fatal error follows, and the partial image came back.
 *  - Data that ends before the last output row is truncation, as PIL makes it (its decoder
 *    asks for more and the file has none); bytes missing after the last row (an absent EOI)
 *    are not. libjpeg's memory source would fill the rest with grey and only warn.
 *  - Crops are aligned to the image's own iMCU width, whatever its sampling factors
 *    (TurboJPEG refuses crop regions of images whose subsampling it cannot name).
 *
 * Errors longjmp back into the function of this file that set the jump: no Rust frame lies
 * between setjmp and longjmp. Nothing is printed: warnings are counted, the first kept.
 */
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "jpeglib.h"
#include "jerror.h"

/* What a call gave (pr_status.kind). Mirrored in src/codec/image/jpeg.rs. */
enum {
  PR_OK = 0,
  PR_TRUNCATED = 1,
  PR_CORRUPT = 2,
  PR_UNSUPPORTED = 3,
  PR_TOO_LARGE = 4,
  PR_INTERNAL = 5
};

/* The stored colours (pr_header.colors). */
enum { PR_GRAY = 0, PR_COLOR = 1, PR_CMYK = 2 };

/* The pixel layout a decode writes (the `out` argument of pr_jpeg_decode). */
enum { PR_OUT_RGB = 0, PR_OUT_GRAY = 1, PR_OUT_CMYK = 2 };

#define PR_MESSAGE_LEN 200

typedef struct {
  int32_t kind;
  /* Warnings libjpeg recovered from. */
  int32_t warnings;
  /* The fatal error's text; with kind PR_OK, the first warning's (or empty). */
  char message[PR_MESSAGE_LEN];
} pr_status;

typedef struct {
  uint32_t width, height;
  int32_t colors;
  int32_t progressive;
  int32_t precision;
  /* Lossless JPEG (SOF3): no crop or scaled decode. */
  int32_t lossless;
  /* Crop regions start on a multiple of this many columns (the iMCU width). */
  uint32_t crop_align;
} pr_header;

typedef struct {
  struct jpeg_decompress_struct cinfo;
  struct jpeg_error_mgr err;
  struct jpeg_source_mgr src;
  struct jpeg_progress_mgr progress;
  jmp_buf jump;
  pr_status *status;
  const uint8_t *data;
  size_t len;
  /* Every output row has been read: data ending now is not truncation. */
  int rows_done;
  int scan_limit;
} pr_decoder;

static pr_decoder *decoder_of(j_common_ptr c) { return (pr_decoder *)c->client_data; }

static void fail(pr_decoder *d, int kind, const char *message) {
  d->status->kind = kind;
  snprintf(d->status->message, PR_MESSAGE_LEN, "%s", message);
  longjmp(d->jump, 1);
}

static int classify(int code) {
  switch (code) {
  case JERR_BAD_PRECISION:
  case JERR_NOT_COMPILED:
  case JERR_NOTIMPL:
  case JERR_CONVERSION_NOTIMPL:
  case JERR_CCIR601_NOTIMPL:
  case JERR_ARITH_NOTIMPL:
  case JERR_FRACT_SAMPLE_NOTIMPL:
    return PR_UNSUPPORTED;
  case JERR_OUT_OF_MEMORY:
    return PR_TOO_LARGE;
  default:
    return PR_CORRUPT;
  }
}

static void on_error_exit(j_common_ptr c) {
  pr_decoder *d = decoder_of(c);
  d->status->kind = classify(c->err->msg_code);
  (*c->err->format_message)(c, d->status->message);
  longjmp(d->jump, 1);
}

static void on_emit_message(j_common_ptr c, int level) {
  pr_decoder *d = decoder_of(c);
  if (level >= 0)
    return; /* trace messages */
  if (d->status->warnings++ == 0)
    (*c->err->format_message)(c, d->status->message);
}

static void on_output_message(j_common_ptr c) { (void)c; }

static void on_progress(j_common_ptr c) {
  pr_decoder *d = decoder_of(c);
  if (d->cinfo.input_scan_number > d->scan_limit) {
    char m[PR_MESSAGE_LEN];
    snprintf(m, sizeof m, "a progressive JPEG of more than %d scans", d->scan_limit);
    fail(d, PR_CORRUPT, m);
  }
}

static void src_init(j_decompress_ptr c) { (void)c; }

static void src_term(j_decompress_ptr c) { (void)c; }

static boolean src_fill(j_decompress_ptr c) {
  static const JOCTET eoi[2] = {0xFF, (JOCTET)JPEG_EOI};
  pr_decoder *d = decoder_of((j_common_ptr)c);
  if (!d->rows_done)
    fail(d, PR_TRUNCATED, "the data ends before the image does");
  /* Only the end marker is missing: give libjpeg one. */
  c->src->next_input_byte = eoi;
  c->src->bytes_in_buffer = sizeof eoi;
  return TRUE;
}

static void src_skip(j_decompress_ptr c, long n) {
  struct jpeg_source_mgr *s = c->src;
  if (n <= 0)
    return;
  while (n > (long)s->bytes_in_buffer) {
    n -= (long)s->bytes_in_buffer;
    (void)(*s->fill_input_buffer)(c);
  }
  s->next_input_byte += (size_t)n;
  s->bytes_in_buffer -= (size_t)n;
}

/* A fresh decompressor reading `data`. Call inside the function that set d->jump. */
static void start(pr_decoder *d) {
  d->cinfo.err = jpeg_std_error(&d->err);
  d->err.error_exit = on_error_exit;
  d->err.emit_message = on_emit_message;
  d->err.output_message = on_output_message;
  jpeg_create_decompress(&d->cinfo);
  d->cinfo.client_data = d;
  d->src.init_source = src_init;
  d->src.fill_input_buffer = src_fill;
  d->src.skip_input_data = src_skip;
  d->src.resync_to_restart = jpeg_resync_to_restart;
  d->src.term_source = src_term;
  d->src.next_input_byte = d->data;
  d->src.bytes_in_buffer = d->len;
  d->cinfo.src = &d->src;
  d->progress.progress_monitor = on_progress;
  d->cinfo.progress = &d->progress;
  jpeg_read_header(&d->cinfo, TRUE);
}

static void header_of(const struct jpeg_decompress_struct *c, pr_header *h) {
  h->width = c->image_width;
  h->height = c->image_height;
  switch (c->jpeg_color_space) {
  case JCS_GRAYSCALE:
    h->colors = PR_GRAY;
    break;
  case JCS_CMYK:
  case JCS_YCCK:
    h->colors = PR_CMYK;
    break;
  default:
    h->colors = PR_COLOR;
  }
  h->progressive = c->progressive_mode ? 1 : 0;
  h->precision = c->data_precision;
  /* A lossless scan has a predictor (Ss 1-7) and no spectral range (Se 0). */
  h->lossless = !c->progressive_mode && c->Ss != 0 && c->Se == 0;
  /* jpeg_crop_scanline's alignment at full scale (DCTSIZE-wide blocks). */
  h->crop_align = (c->comps_in_scan == 1 && c->num_components == 1)
                      ? DCTSIZE
                      : (uint32_t)(DCTSIZE * c->max_h_samp_factor);
}

static void init(pr_decoder *d, const uint8_t *data, size_t len, pr_status *status, int scan_limit) {
  memset(d, 0, sizeof *d);
  memset(status, 0, sizeof *status);
  d->status = status;
  d->data = data;
  d->len = len;
  d->scan_limit = scan_limit;
}

/* Reads the header of `data` into `h`. Returns the status kind. */
int pr_jpeg_header(const uint8_t *data, size_t len, pr_header *h, pr_status *status) {
  pr_decoder d;
  init(&d, data, len, status, 0x7FFFFFFF);
  if (setjmp(d.jump) == 0) {
    start(&d);
    header_of(&d.cinfo, h);
  }
  jpeg_destroy_decompress(&d.cinfo);
  return status->kind;
}

/* Decodes `data` into `out` (`pitch` bytes a row, `out_len` bytes in all) as `out_space`:
 * at 1/`denom` scale (1, 2, 4 or 8) the whole image, or (at full scale, `w` > 0) the region
 * `x`, `y`, `w`, `h`, `x` a multiple of the crop alignment. The header must still say
 * `width` x `height`: the caller sized `out` from it. Returns the status kind. */
int pr_jpeg_decode(const uint8_t *data, size_t len, uint32_t width, uint32_t height,
                   uint32_t x, uint32_t y, uint32_t w, uint32_t h, uint32_t denom,
                   int32_t out_space, int32_t scan_limit, uint8_t *out, size_t out_len,
                   size_t pitch, pr_status *status) {
  pr_decoder d;
  JSAMPROW rows[16];
  init(&d, data, len, status, scan_limit);
  if (setjmp(d.jump) == 0) {
    struct jpeg_decompress_struct *c = &d.cinfo;
    int crop = w > 0 && (x != 0 || y != 0 || w != width || h != height);
    JDIMENSION rx = x, rw = w, first, last, n;
    pr_header hdr;
    start(&d);
    header_of(c, &hdr);
    if (c->image_width != width || c->image_height != height)
      fail(&d, PR_INTERNAL, "internal: the JPEG header differs from the one the output was sized by");
    if (c->data_precision != 8)
      fail(&d, PR_UNSUPPORTED, "a JPEG of 12 or 16 bits per sample");
    if ((crop || denom != 1) && hdr.lossless)
      fail(&d, PR_INTERNAL, "internal: a crop or scaled decode of a lossless JPEG");
    switch (out_space) {
    case PR_OUT_RGB:
      c->out_color_space = JCS_RGB;
      break;
    case PR_OUT_GRAY:
      c->out_color_space = JCS_GRAYSCALE;
      break;
    case PR_OUT_CMYK:
      c->out_color_space = JCS_CMYK;
      break;
    default:
      fail(&d, PR_INTERNAL, "internal: an unknown JPEG output layout");
    }
    /* PIL's settings: the accurate integer IDCT, fancy upsampling (libjpeg's defaults). */
    c->dct_method = JDCT_ISLOW;
    c->do_fancy_upsampling = TRUE;
    c->scale_num = 1;
    c->scale_denom = denom;
    jpeg_start_decompress(c);
    if (crop) {
      jpeg_crop_scanline(c, &rx, &rw);
      if (rx != x || rw != w)
        fail(&d, PR_INTERNAL, "internal: a JPEG crop region off the iMCU grid");
      first = y;
      last = y + h;
    } else {
      first = 0;
      last = c->output_height;
    }
    if (last > c->output_height || (size_t)(last - first) * pitch > out_len ||
        (size_t)c->output_width * (size_t)c->output_components > pitch)
      fail(&d, PR_INTERNAL, "internal: a JPEG output buffer of the wrong size");
    if (first > 0 && jpeg_skip_scanlines(c, first) != first)
      fail(&d, PR_CORRUPT, "rows above the crop could not be skipped");
    while (c->output_scanline < last) {
      JDIMENSION want = last - c->output_scanline, k;
      if (want > 16)
        want = 16;
      for (k = 0; k < want; k++)
        rows[k] = out + (size_t)(c->output_scanline - first + k) * pitch;
      n = jpeg_read_scanlines(c, rows, want);
      if (n == 0)
        fail(&d, PR_TRUNCATED, "the data ends before the image does");
    }
    if (c->output_scanline < c->output_height)
      jpeg_skip_scanlines(c, c->output_height - c->output_scanline);
    d.rows_done = 1;
    jpeg_finish_decompress(c);
  }
  jpeg_destroy_decompress(&d.cinfo);
  return status->kind;
}
