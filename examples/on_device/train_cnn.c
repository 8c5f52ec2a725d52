/* train_cnn.c: train the digits CNN with the Adam training step exported by export_cnn.py.
 *
 * Reads the training images and labels, the initial weights and the images of each
 * step's batch written by export_cnn.py (raw float32/int32 files), then calls the
 * exported train_step once per batch. The step computes the loss, the gradients and
 * Adam's update: it reads the parameters and Adam's state (exp_avg and exp_avg_sq of
 * each parameter, the step count) from one set of buffers and writes the next ones to
 * another (its outputs may not overlap its inputs), so the two sets swap after each call.
 * Prints each step's loss, then the mean time of a call; `python export_cnn.py --python`
 * prints the same lines from the Python TrainStep. Needs only libc and libm.
 *
 *   cc -std=c11 -O2 -Ibuild examples/on_device/train_cnn.c build/cnn.o -lm -o build/train_cnn
 *   ./build/train_cnn build/cnn_data [steps]
 */
#define _POSIX_C_SOURCE 199309L
#define WRITTEN_BY "export_cnn.py"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "raw_files.h"
#include "cnn.h"

#define BATCH TRAIN_STEP_X_DIM0
#define PIXELS (TRAIN_STEP_X_DIM1 * TRAIN_STEP_X_DIM2 * TRAIN_STEP_X_DIM3)
#define N_PARAMS 4
/* the parameters, then Adam's exp_avg and exp_avg_sq of each, in the header's order */
#define N_TENSORS (3 * N_PARAMS)

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "build/cnn_data";
    size_t train_bytes, order_bytes;
    float *train_x = load(dir, "train_x.f32", 0, PIXELS * sizeof(float), &train_bytes);
    size_t n_train = train_bytes / (PIXELS * sizeof(float));
    int32_t *train_y = load(dir, "train_y.i32", n_train * sizeof(int32_t), 1, NULL);
    int32_t *order = load(dir, "order.i32", 0, BATCH * sizeof(int32_t), &order_bytes);
    int steps = (int)(order_bytes / (BATCH * sizeof(int32_t)));
    steps = count_to_run(argc, argv, steps, "steps");
    check_order(order, order_bytes / sizeof(int32_t), n_train);

    static const char *names[N_PARAMS] = {"conv_w.f32", "conv_b.f32", "dense_w.f32",
                                          "dense_b.f32"};
    static const size_t sizes[N_TENSORS] = {
        TRAIN_STEP_CONV_W_SIZE, TRAIN_STEP_CONV_B_SIZE, TRAIN_STEP_DENSE_W_SIZE,
        TRAIN_STEP_DENSE_B_SIZE,
        TRAIN_STEP_CONV_W_EXP_AVG_SIZE, TRAIN_STEP_CONV_W_EXP_AVG_SQ_SIZE,
        TRAIN_STEP_CONV_B_EXP_AVG_SIZE, TRAIN_STEP_CONV_B_EXP_AVG_SQ_SIZE,
        TRAIN_STEP_DENSE_W_EXP_AVG_SIZE, TRAIN_STEP_DENSE_W_EXP_AVG_SQ_SIZE,
        TRAIN_STEP_DENSE_B_EXP_AVG_SIZE, TRAIN_STEP_DENSE_B_EXP_AVG_SQ_SIZE};
    /* set[c]: the values a call reads, set[1 - c]: those it writes. Adam starts from zero
     * moments and step 0, as tg.optim's initial_values. */
    float *set[2][N_TENSORS];
    int32_t *count[2] = {zeroed(sizeof(int32_t)), zeroed(sizeof(int32_t))};
    for (int k = 0; k < N_TENSORS; k++) {
        set[0][k] = k < N_PARAMS ? load(dir, names[k], sizes[k] * sizeof(float), 1, NULL)
                                 : zeroed(sizes[k] * sizeof(float));
        set[1][k] = zeroed(sizes[k] * sizeof(float));
    }
    float *x = zeroed(TRAIN_STEP_X_BYTES), *loss = zeroed(sizeof(float));
    int32_t *labels = zeroed(TRAIN_STEP_LABELS_BYTES);
    void *workspace = zeroed(TRAIN_STEP_WORKSPACE_BYTES);

    double elapsed = 0.0;
    int c = 0;
    for (int s = 0; s < steps; s++) {
        const int32_t *rows = order + (size_t)s * BATCH;
        for (int r = 0; r < BATCH; r++) {
            memcpy(x + r * PIXELS, train_x + (size_t)rows[r] * PIXELS, PIXELS * sizeof(float));
            labels[r] = train_y[rows[r]];
        }
        float **in = set[c], **out = set[1 - c];
        double start = seconds();
        int status = train_step(x, labels, in[0], in[1], in[2], in[3], in[4], in[5], in[6],
                                in[7], in[8], in[9], in[10], in[11], count[c], loss, out[0],
                                out[1], out[2], out[3], out[4], out[5], out[6], out[7],
                                out[8], out[9], out[10], out[11], count[1 - c], workspace);
        elapsed += seconds() - start;
        if (status != 0) {
            fprintf(stderr, "train_step failed at step %d: %s\n", s + 1,
                    train_step_error_string(status));
            return 1;
        }
        c = 1 - c;
        printf("%d %.9g\n", s + 1, (double)*loss);
    }
    if (steps > 0 && *count[c] != steps) {
        fprintf(stderr, "Adam counted %d steps, not %d\n", (int)*count[c], steps);
        return 1;
    }
    printf("time %.4f ms per step\n", steps > 0 ? 1e3 * elapsed / steps : 0.0);
    return 0;
}
