/* raw_files.h: what train.c and train_cnn.c share: 64-byte aligned zeroed buffers, whole
 * raw files read into them, the checks of the batch order and of the count asked for on
 * the command line, and a monotonic clock. Needs only libc.
 *
 * Define WRITTEN_BY (the script that writes the files, for the message when one is
 * missing) before including it. */
#ifndef ON_DEVICE_RAW_FILES_H
#define ON_DEVICE_RAW_FILES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef WRITTEN_BY
#define WRITTEN_BY "the export script"
#endif

/* `bytes` zero bytes, 64-byte aligned (what an exported entry point requires), rounded
 * up to a whole number of 64-byte lines as aligned_alloc wants; exits when out of memory. */
static void *zeroed(size_t bytes) {
    size_t rounded = (bytes + 63) / 64 * 64;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    memset(p, 0, rounded ? rounded : 64);
    return p;
}

/* The whole file dir/name, which must hold `expected` bytes (any multiple of `row` bytes
 * if expected is 0); its size goes to *bytes. */
static void *load(const char *dir, const char *name, size_t expected, size_t row, size_t *bytes) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s (run " WRITTEN_BY " first)\n", path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (size < 0 || (expected && (size_t)size != expected) || (!expected && size % row)) {
        fprintf(stderr, "%s has %ld bytes; expected %zu\n", path, size, expected ? expected : row);
        exit(1);
    }
    void *data = zeroed((size_t)size);
    if (fread(data, 1, (size_t)size, f) != (size_t)size) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(1);
    }
    fclose(f);
    if (bytes) *bytes = (size_t)size;
    return data;
}

/* How many of the `available` epochs or steps (`unit`) order.i32 holds to run: all, or
 * argv[2] when given; exits when it asks for more. */
static int count_to_run(int argc, char **argv, int available, const char *unit) {
    if (argc <= 2) return available;
    int wanted = atoi(argv[2]);
    if (wanted < 0 || wanted > available) {
        fprintf(stderr, "order.i32 holds the batches of %d %s; for %s, run " WRITTEN_BY
                        " --%s %s\n", available, unit, argv[2], unit, argv[2]);
        exit(1);
    }
    return wanted;
}

/* Exits unless each of the n entries of order is one of the n_train training images. */
static void check_order(const int32_t *order, size_t n, size_t n_train) {
    for (size_t i = 0; i < n; i++) {
        if (order[i] < 0 || (size_t)order[i] >= n_train) {
            fprintf(stderr, "order.i32 holds %d, not an image of the %zu\n", (int)order[i],
                    n_train);
            exit(1);
        }
    }
}

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

#endif
