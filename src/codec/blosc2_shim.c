/* packread's glue to c-blosc2 (built by build.rs): decodes one blosc 1.x/2 chunk, or one
 * contiguous frame (what the HDF5 blosc2 filter, id 32026, stores per chunk), into a caller's
 * buffer of a size the caller knows. Kept in C because it reads c-blosc2's structs (frame
 * metalayers, b2nd shapes), whose layout Rust would otherwise have to mirror.
 *
 * Every call uses contexts of its own with one thread, so calls from several threads never
 * share state. Errors are reported as a message in `why`, never by aborting. */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "b2nd.h"
#include "blosc2.h"

void packread_blosc2_init(void) { blosc2_init(); }

static void say(char *why, size_t whylen, const char *msg, long long a, long long b) {
  if (why != NULL && whylen > 0) {
    snprintf(why, whylen, msg, a, b);
  }
}

/* Decodes the blosc chunk `src` (its header says how many bytes it holds) into `dst`.
 * Returns the decoded size, or a negative c-blosc2 error code. */
int packread_blosc_chunk_decode(const uint8_t *src, int32_t srclen, uint8_t *dst,
                                int32_t dstlen) {
  blosc2_dparams dparams = BLOSC2_DPARAMS_DEFAULTS;
  dparams.nthreads = 1;
  blosc2_context *dctx = blosc2_create_dctx(dparams);
  if (dctx == NULL) {
    return BLOSC2_ERROR_MEMORY_ALLOC;
  }
  int n = blosc2_decompress_ctx(dctx, src, srclen, dst, dstlen);
  blosc2_free_ctx(dctx);
  return n;
}

/* Offsets in a contiguous frame's header (c-blosc2's frame.h, a private header; the format is
 * documented in c-blosc2's README_CFRAME_FORMAT.rst): the number of filters, then the filter
 * ids, in the fixed-size part that every frame has; the header's own length before them. */
enum {
  FRAME_HEADER_LEN_AT = 11,
  FRAME_NFILTERS_AT = 70,
  FRAME_FILTERS_AT = 71,
  FRAME_MIN_HEADER = 87,
  MAX_FRAME_CHUNKS = 4096
};

/* Whether the filter ids a frame's header names are ones c-blosc2 accepts. c-blosc2 2.15's
 * `frame_to_schunk` leaks its compression parameters (and the super-chunk) when the context
 * it builds from them refuses a filter id, so such a frame is refused here, before c-blosc2
 * sees it (found by the `blosc2` fuzz target's leak check). `src` holds at least the fixed
 * header. */
static int frame_filters_valid(const uint8_t *src) {
  int nfilters = src[FRAME_NFILTERS_AT];
  if (nfilters > BLOSC2_MAX_FILTERS) {
    return 1; /* c-blosc2 refuses this itself, freeing what it allocated */
  }
  for (int i = 0; i < nfilters; i++) {
    int f = src[FRAME_FILTERS_AT + i];
    if ((f >= BLOSC_LAST_FILTER && f <= BLOSC2_DEFINED_FILTERS_STOP) ||
        (f > BLOSC_LAST_REGISTERED_FILTER && f <= BLOSC2_GLOBAL_REGISTERED_FILTERS_STOP)) {
      return 0;
    }
  }
  return 1;
}

/* Decodes the contiguous frame `src` (`srclen` bytes, read in place, never written) into
 * exactly `dstlen` bytes at `dst`, in C order. With a "b2nd" (or older "caterva") metalayer the
 * frame is an n-dimensional array whose blocks are tiles of the chunk: c-blosc2's b2nd code
 * puts them back in C order. Otherwise it holds one plain chunk. With `dst` NULL, only
 * `*size_out` is set: the bytes the frame decodes to (what the libhdf5 filter allocates).
 * Returns 0, or -1 with a message in `why`. */
static int frame_decode(const uint8_t *src, int64_t srclen, uint8_t *dst, int64_t dstlen,
                        int64_t *size_out, char *why, size_t whylen);

int packread_blosc2_frame_decode(const uint8_t *src, int64_t srclen, uint8_t *dst,
                                 int64_t dstlen, int64_t *size_out, char *why, size_t whylen) {
  *size_out = -1;
  if (srclen < FRAME_MIN_HEADER) {
    say(why, whylen, "blosc2: not a valid contiguous frame of %lld bytes", srclen, 0);
    return -1;
  }
  if (!frame_filters_valid(src)) {
    say(why, whylen, "blosc2: the frame's header names a filter c-blosc2 does not define", 0, 0);
    return -1;
  }
  /* The header's length (big-endian, after its msgpack marker). */
  int64_t header_len = ((int64_t)src[FRAME_HEADER_LEN_AT] << 24) |
                       ((int64_t)src[FRAME_HEADER_LEN_AT + 1] << 16) |
                       ((int64_t)src[FRAME_HEADER_LEN_AT + 2] << 8) |
                       (int64_t)src[FRAME_HEADER_LEN_AT + 3];
  if (header_len < FRAME_MIN_HEADER || header_len > srclen) {
    say(why, whylen, "blosc2: frame header of %lld bytes in a frame of %lld", header_len, srclen);
    return -1;
  }
  /* c-blosc2 2.15 checks a chunk's offset against an in-memory frame's length, but reads the
   * chunk's header at header length + offset, up to header length + 32 bytes past the end
   * (found by the blosc2 fuzz target under AddressSanitizer). It reads a copy with that much
   * zeroed room behind it; `frame_chunks_inside` then refuses any chunk whose bytes leave the
   * frame, before anything is decoded. Checking the offsets first instead (no copy) would need
   * `blosc2_frame_get_offsets`, which decodes a NULL offsets chunk when the frame's offsets lie
   * past its end (a SEGV the fuzz target found; its input is kept as a seed). */
  size_t room = (size_t)header_len + 64;
  uint8_t *copy = malloc((size_t)srclen + room);
  if (copy == NULL) {
    say(why, whylen, "blosc2: out of memory for a frame of %lld bytes", srclen, 0);
    return -1;
  }
  memcpy(copy, src, (size_t)srclen);
  memset(copy + srclen, 0, room);
  int rc = frame_decode(copy, srclen, dst, dstlen, size_out, why, whylen);
  free(copy);
  return rc;
}

/* Whether every chunk of the frame `sc` (read from `frame`, `len` bytes) lies inside it. At most
 * MAX_FRAME_CHUNKS chunks (an HDF5 blosc2 chunk is a frame of one). */
static int frame_chunks_inside(blosc2_schunk *sc, const uint8_t *frame, int64_t len) {
  if (sc->nchunks < 0 || sc->nchunks > MAX_FRAME_CHUNKS) {
    return 0;
  }
  for (int64_t i = 0; i < sc->nchunks; i++) {
    uint8_t *chunk = NULL;
    bool needs_free = false;
    int cbytes = blosc2_schunk_get_lazychunk(sc, i, &chunk, &needs_free);
    int ok = cbytes >= BLOSC_MIN_HEADER_LENGTH && chunk != NULL;
    /* A chunk c-blosc2 made itself (zeros, NaNs) is its own allocation; any other points into
     * the frame. */
    if (ok && !needs_free) {
      ok = chunk >= frame && (int64_t)(chunk - frame) <= len - cbytes;
    }
    if (needs_free) {
      free(chunk);
    }
    if (!ok) {
      return 0;
    }
  }
  return 1;
}

static int frame_decode(const uint8_t *src, int64_t srclen, uint8_t *dst, int64_t dstlen,
                        int64_t *size_out, char *why, size_t whylen) {
  /* c-blosc2 checks the length against the frame header, and with copy = false never frees
   * or writes the buffer it is given. */
  blosc2_schunk *sc = blosc2_schunk_from_buffer((uint8_t *)src, srclen, false);
  if (sc == NULL) {
    say(why, whylen, "blosc2: not a valid contiguous frame of %lld bytes", srclen, 0);
    return -1;
  }
  if (!frame_chunks_inside(sc, src, srclen)) {
    say(why, whylen, "blosc2: a chunk of the frame (%lld chunks) lies outside its %lld bytes",
        sc->nchunks, srclen);
    blosc2_schunk_free(sc);
    return -1;
  }
  int rc = -1;
  if (blosc2_meta_exists(sc, "b2nd") >= 0 || blosc2_meta_exists(sc, "caterva") >= 0) {
    b2nd_array_t *array = NULL;
    if (b2nd_from_schunk(sc, &array) < 0 || array == NULL) {
      say(why, whylen, "blosc2: the frame's b2nd metadata is invalid", 0, 0);
      blosc2_schunk_free(sc);
      return -1;
    }
    /* The array owns the super-chunk from here on. */
    int64_t start[B2ND_MAX_DIM] = {0};
    int64_t size = array->sc->typesize;
    for (int i = 0; i < array->ndim; i++) {
      size *= array->shape[i];
    }
    if (array->ndim < 1 || array->ndim > B2ND_MAX_DIM || size <= 0) {
      say(why, whylen, "blosc2: b2nd array of rank %lld and %lld bytes", array->ndim, size);
    } else if (dst == NULL) {
      *size_out = size;
      rc = 0;
    } else if (size != dstlen) {
      say(why, whylen, "blosc2: b2nd array of %lld bytes, the chunk holds %lld", size, dstlen);
    } else if (b2nd_get_slice_cbuffer(array, start, array->shape, dst, array->shape, dstlen) < 0) {
      say(why, whylen, "blosc2: corrupt b2nd array (%lld bytes)", size, 0);
    } else {
      *size_out = size;
      rc = 0;
    }
    b2nd_free(array);
    return rc;
  }
  if (sc->nchunks != 1) {
    say(why, whylen, "blosc2: frame holds %lld chunks, expected 1", sc->nchunks, 0);
    blosc2_schunk_free(sc);
    return -1;
  }
  uint8_t *chunk = NULL;
  bool needs_free = false;
  int cbytes = blosc2_schunk_get_lazychunk(sc, 0, &chunk, &needs_free);
  int32_t nbytes = 0;
  if (cbytes < BLOSC_MIN_HEADER_LENGTH || chunk == NULL ||
      blosc2_cbuffer_sizes(chunk, &nbytes, NULL, NULL) < 0 || nbytes < 0) {
    say(why, whylen, "blosc2: the frame's chunk cannot be read (code %lld)", cbytes, 0);
  } else if (dst == NULL) {
    *size_out = nbytes;
    rc = 0;
  } else if ((int64_t)nbytes != dstlen) {
    say(why, whylen, "blosc2: chunk header says %lld decoded bytes, the chunk holds %lld",
        nbytes, dstlen);
  } else {
    blosc2_dparams dparams = BLOSC2_DPARAMS_DEFAULTS;
    dparams.nthreads = 1;
    dparams.schunk = sc;
    blosc2_context *dctx = blosc2_create_dctx(dparams);
    int n = dctx == NULL ? BLOSC2_ERROR_MEMORY_ALLOC
                         : blosc2_decompress_ctx(dctx, chunk, cbytes, dst, (int32_t)dstlen);
    if (dctx != NULL) {
      blosc2_free_ctx(dctx);
    }
    if (n != nbytes) {
      say(why, whylen, "blosc2: corrupt chunk (c-blosc2 returned %lld, expected %lld bytes)", n,
          nbytes);
    } else {
      *size_out = nbytes;
      rc = 0;
    }
  }
  if (needs_free) {
    free(chunk);
  }
  blosc2_schunk_free(sc);
  return rc;
}

/* For tests and benchmarks: compresses `src` into one blosc chunk (c-blosc2's own format)
 * with codec `compname`, or, with `frame` set, into a contiguous frame holding that one chunk
 * (what the HDF5 blosc2 filter writes for a 1-d chunk). Returns the bytes written to `*out`
 * (malloc'ed; the caller frees it with packread_blosc2_free), or a negative code. */
int64_t packread_blosc2_compress(const uint8_t *src, int32_t srclen, int32_t typesize,
                                 int clevel, int doshuffle, const char *compname, int frame,
                                 uint8_t **out) {
  *out = NULL;
  blosc2_cparams cparams = BLOSC2_CPARAMS_DEFAULTS;
  cparams.typesize = typesize;
  cparams.clevel = clevel;
  cparams.filters[BLOSC2_MAX_FILTERS - 1] = (uint8_t)doshuffle;
  cparams.nthreads = 1;
  int code = blosc2_compname_to_compcode(compname);
  if (code < 0) {
    return BLOSC2_ERROR_CODEC_SUPPORT;
  }
  cparams.compcode = (uint8_t)code;
  if (!frame) {
    int32_t cap = srclen + BLOSC2_MAX_OVERHEAD;
    uint8_t *buf = malloc((size_t)cap);
    blosc2_context *cctx = blosc2_create_cctx(cparams);
    if (buf == NULL || cctx == NULL) {
      free(buf);
      if (cctx != NULL) {
        blosc2_free_ctx(cctx);
      }
      return BLOSC2_ERROR_MEMORY_ALLOC;
    }
    int n = blosc2_compress_ctx(cctx, src, srclen, buf, cap);
    blosc2_free_ctx(cctx);
    if (n <= 0) {
      free(buf);
      return n < 0 ? n : BLOSC2_ERROR_FAILURE;
    }
    *out = buf;
    return n;
  }
  blosc2_storage storage = {.cparams = &cparams, .contiguous = false};
  blosc2_schunk *sc = blosc2_schunk_new(&storage);
  if (sc == NULL) {
    return BLOSC2_ERROR_FAILURE;
  }
  int64_t n = blosc2_schunk_append_buffer(sc, src, srclen);
  if (n >= 0) {
    bool needs_free = false;
    n = blosc2_schunk_to_buffer(sc, out, &needs_free);
    if (n >= 0 && !needs_free) {
      /* A view into the super-chunk: copy it out before the super-chunk goes. */
      uint8_t *copy = malloc((size_t)n);
      if (copy == NULL) {
        n = BLOSC2_ERROR_MEMORY_ALLOC;
      } else {
        memcpy(copy, *out, (size_t)n);
      }
      *out = copy;
    }
  }
  blosc2_schunk_free(sc);
  return n;
}

void packread_blosc2_free(uint8_t *p) { free(p); }
