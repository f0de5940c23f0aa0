/* packread's read-only libhdf5 file driver (VFD), through which libhdf5 opens every file
 * packread reads: its reads of a local file's or an object's superblock, object headers,
 * chunk index and of the datasets it reads itself are calls into packread (a `pread` on the
 * reader's own descriptor, or cached blocks of an object fetched by ranged requests, see
 * src/formats/hdf5/driver.rs).
 *
 * Why C: the driver is a table of callbacks (`H5FD_class_t`) whose layout is the libhdf5
 * version's own. Compiled here against the headers of the very libhdf5 packread links, the
 * table is right by construction; the Rust binding of it in hdf5-sys follows an older layout
 * (no `version` field, no vector I/O).
 *
 * Why our own driver:
 *  - libhdf5 shares one open file, metadata cache included, between opens of files its
 *    driver says are the same (sec2: the same device and inode). A file rewritten in place
 *    (`cp other.h5 train.h5`) while a reader holds it would then be opened by the next reader
 *    with the old file's metadata against the new bytes: rows of neither file, no error. Here
 *    each reader's file is its own (compared by the reader's source), never shared.
 *  - libhdf5's ROS3 (S3) driver needs libcurl, OpenSSL and, in HDF5 2.x, aws-c-s3, none of
 *    which the bundled static libhdf5 has; and it reads through its own client, where
 *    packread wants its one client, cache and index cache for all formats.
 *
 * A file libhdf5 opens by another name (an external link's target, a virtual dataset's
 * source in another file) is read by name, with `pread` on a descriptor of its own. */

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hdf5.h"
#include "H5FDdevelop.h"

/* packread's read: fill `buf` with `size` bytes at `addr`; 0 on success. */
typedef int (*packread_read_fn)(const void *ctx, uint64_t addr, size_t size, void *buf);

/* What the file access property list carries to `open` (copied by libhdf5, `fapl_size`):
 * the file packread opens, named `name` (a string packread keeps alive while the file is
 * open), read with `read(ctx, ...)`. */
typedef struct {
    const void *ctx;
    const char *name;
    uint64_t eof;
    packread_read_fn read;
} packread_vfd_info_t;

typedef struct {
    H5FD_t pub; /* libhdf5's part; must come first */
    packread_vfd_info_t info;
    /* A file opened by its name (an external link's target): its descriptor, else -1. */
    int fd;
    haddr_t eoa;
} packread_vfd_t;

/* `read` of a file opened by name: `pread` on its own descriptor. */
static int pr_read_fd(const void *ctx, uint64_t addr, size_t size, void *buf) {
    int fd = *(const int *)ctx;
    char *at = buf;
    while (size > 0) {
        ssize_t n = pread(fd, at, size, (off_t)addr);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        at += n;
        addr += (uint64_t)n;
        size -= (size_t)n;
    }
    return 0;
}

static H5FD_t *pr_open(const char *name, unsigned flags, hid_t fapl, haddr_t maxaddr) {
    (void)maxaddr;
    if (flags & (H5F_ACC_RDWR | H5F_ACC_CREAT | H5F_ACC_TRUNC | H5F_ACC_EXCL))
        return NULL; /* read-only: nothing the user wrote is modified */
    if (name == NULL)
        return NULL;
    packread_vfd_t *f = calloc(1, sizeof *f);
    if (f == NULL)
        return NULL;
    f->fd = -1;
    /* The file packread opened carries its source; libhdf5 gives a file it opens itself (an
     * external link's target) the driver without it. */
    const packread_vfd_info_t *info = H5Pget_driver_info(fapl);
    if (info != NULL && info->read != NULL && info->name != NULL && strcmp(name, info->name) == 0) {
        f->info = *info;
        return &f->pub;
    }
    /* Another file: opened by its name, never blocking on a FIFO, a regular file only. */
    struct stat st;
    int fd = open(name, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0)
            close(fd);
        free(f);
        return NULL;
    }
    f->fd = fd;
    f->info.ctx = &f->fd;
    f->info.name = NULL;
    f->info.eof = (uint64_t)st.st_size;
    f->info.read = pr_read_fd;
    return &f->pub;
}

static herr_t pr_close(H5FD_t *file) {
    packread_vfd_t *f = (packread_vfd_t *)file;
    if (f->fd >= 0)
        close(f->fd);
    free(file);
    return 0;
}

/* Files are the same only when packread's source is: two readers of one path, or a file and
 * a link to itself opened by name, are never shared. */
static int pr_cmp(const H5FD_t *a, const H5FD_t *b) {
    const void *x = ((const packread_vfd_t *)a)->info.ctx, *y = ((const packread_vfd_t *)b)->info.ctx;
    return x < y ? -1 : x > y ? 1 : 0;
}

static herr_t pr_query(const H5FD_t *file, unsigned long *flags) {
    (void)file;
    /* libhdf5 may gather small metadata reads and sieve raw data reads into larger ones:
     * fewer calls, each served from packread's cached blocks. */
    *flags = H5FD_FEAT_AGGREGATE_METADATA | H5FD_FEAT_ACCUMULATE_METADATA | H5FD_FEAT_DATA_SIEVE |
             H5FD_FEAT_AGGREGATE_SMALLDATA;
    return 0;
}

static haddr_t pr_get_eoa(const H5FD_t *file, H5FD_mem_t type) {
    (void)type;
    return ((const packread_vfd_t *)file)->eoa;
}

static herr_t pr_set_eoa(H5FD_t *file, H5FD_mem_t type, haddr_t addr) {
    (void)type;
    ((packread_vfd_t *)file)->eoa = addr;
    return 0;
}

static haddr_t pr_get_eof(const H5FD_t *file, H5FD_mem_t type) {
    (void)type;
    return (haddr_t)((const packread_vfd_t *)file)->info.eof;
}

static herr_t pr_read(H5FD_t *file, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size,
                      void *buf) {
    (void)type;
    (void)dxpl;
    const packread_vfd_t *f = (const packread_vfd_t *)file;
    uint64_t eof = f->info.eof;
    if (addr == HADDR_UNDEF)
        return -1;
    /* Bytes past the end of the file read as zeros, as with libhdf5's own drivers. */
    size_t n = size;
    if (addr >= eof)
        n = 0;
    else if (size > eof - addr)
        n = (size_t)(eof - addr);
    if (n > 0 && f->info.read(f->info.ctx, (uint64_t)addr, n, buf) != 0)
        return -1;
    if (n < size)
        memset((char *)buf + n, 0, size - n);
    return 0;
}

static herr_t pr_write(H5FD_t *file, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size,
                       const void *buf) {
    (void)file, (void)type, (void)dxpl, (void)addr, (void)size, (void)buf;
    return -1;
}

static herr_t pr_truncate(H5FD_t *file, hid_t dxpl, bool closing) {
    (void)file, (void)dxpl, (void)closing;
    return 0;
}

static herr_t pr_lock(H5FD_t *file, bool rw) {
    (void)file;
    return rw ? -1 : 0;
}

static herr_t pr_unlock(H5FD_t *file) {
    (void)file;
    return 0;
}

static const H5FD_class_t packread_vfd_class = {
    H5FD_CLASS_VERSION,
    (H5FD_class_value_t)(H5_VFD_RESERVED + 0x7072), /* "pr": a value of the user range */
    "packread",
    (haddr_t)INT64_MAX,
    H5F_CLOSE_WEAK,
    NULL,                        /* terminate */
    NULL, NULL, NULL,            /* sb_size, sb_encode, sb_decode */
    sizeof(packread_vfd_info_t), /* fapl_size: libhdf5 copies the info as bytes */
    NULL, NULL, NULL,            /* fapl_get, fapl_copy, fapl_free */
    0, NULL, NULL,               /* dxpl_size, dxpl_copy, dxpl_free */
    pr_open,
    pr_close,
    pr_cmp,
    pr_query,
    NULL, /* get_type_map */
    NULL, /* alloc */
    NULL, /* free */
    pr_get_eoa,
    pr_set_eoa,
    pr_get_eof,
    NULL, /* get_handle */
    pr_read,
    pr_write,
    NULL, NULL, NULL, NULL, /* read_vector, write_vector, read_selection, write_selection */
    NULL,                   /* flush */
    pr_truncate,
    pr_lock,
    pr_unlock,
    NULL, /* del */
    NULL, /* ctl */
    H5FD_FLMAP_DICHOTOMY,
};

/* The driver's id, registering it the first time (call with libhdf5's lock held). */
hid_t packread_vfd_id(void) {
    static hid_t id = H5I_INVALID_HID;
    if (id < 0 || H5Iis_valid(id) <= 0)
        id = H5FDregister(&packread_vfd_class);
    return id;
}

/* A file access property list that opens through the driver the file named `name`, reading
 * with `read(ctx, ...)` a file of `eof` bytes; H5I_INVALID_HID on failure. The caller closes
 * it; `name` lives as long as the file is open. */
hid_t packread_vfd_fapl(const void *ctx, const char *name, uint64_t eof, packread_read_fn read) {
    hid_t driver = packread_vfd_id();
    if (driver < 0)
        return H5I_INVALID_HID;
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0)
        return H5I_INVALID_HID;
    packread_vfd_info_t info = {ctx, name, eof, read};
    if (H5Pset_driver(fapl, driver, &info) < 0) {
        H5Pclose(fapl);
        return H5I_INVALID_HID;
    }
    return fapl;
}
