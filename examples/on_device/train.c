/* train.c: train the digits MLP with the training step exported by export_mlp.py.
 *
 * Reads the data, the initial weights and each epoch's order of the training images
 * written by export_mlp.py (raw float32/int32 files), runs SGD with momentum calling the
 * exported train_step on batches of BATCH images, then classifies the test set with the
 * exported evaluate and prints the test accuracy. The recipe (batch order, learning rate,
 * momentum, epochs) is export_mlp.py's, so the accuracy matches
 * `python export_mlp.py --python`. Needs only libc and libm.
 *
 *   cc -std=c11 -O2 -ffp-contract=off -Ibuild examples/on_device/train.c build/mlp.o -lm -o build/train
 *   ./build/train build/data [epochs]
 */
#define _POSIX_C_SOURCE 199309L
#define WRITTEN_BY "export_mlp.py"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "raw_files.h"
#include "mlp.h"

#define LEARNING_RATE 0.05f
#define MOMENTUM 0.9f

#define BATCH TRAIN_STEP_X_DIM0
#define FEATURES TRAIN_STEP_X_DIM1
#define CLASSES TRAIN_STEP_B2_DIM0
#define N_TEST EVALUATE_X_DIM0
#define N_PARAMS 4

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "build/data";
    size_t train_bytes, order_bytes;
    float *train_x = load(dir, "train_x.f32", 0, FEATURES * sizeof(float), &train_bytes);
    size_t n_train = train_bytes / (FEATURES * sizeof(float));
    int32_t *train_y = load(dir, "train_y.i32", n_train * sizeof(int32_t), 1, NULL);
    float *test_x = load(dir, "test_x.f32", EVALUATE_X_BYTES, 1, NULL);
    int32_t *test_y = load(dir, "test_y.i32", N_TEST * sizeof(int32_t), 1, NULL);
    int32_t *order = load(dir, "order.i32", 0, n_train * sizeof(int32_t), &order_bytes);
    int epochs = (int)(order_bytes / (n_train * sizeof(int32_t)));
    epochs = count_to_run(argc, argv, epochs, "epochs");
    check_order(order, order_bytes / sizeof(int32_t), n_train);

    static const char *names[N_PARAMS] = {"w1.f32", "b1.f32", "w2.f32", "b2.f32"};
    static const size_t sizes[N_PARAMS] = {TRAIN_STEP_W1_SIZE, TRAIN_STEP_B1_SIZE,
                                           TRAIN_STEP_W2_SIZE, TRAIN_STEP_B2_SIZE};
    float *w[N_PARAMS], *grad[N_PARAMS], *velocity[N_PARAMS];
    for (int k = 0; k < N_PARAMS; k++) {
        w[k] = load(dir, names[k], sizes[k] * sizeof(float), 1, NULL);
        grad[k] = zeroed(sizes[k] * sizeof(float));
        velocity[k] = zeroed(sizes[k] * sizeof(float));
    }
    float *x = zeroed(TRAIN_STEP_X_BYTES), *loss = zeroed(sizeof(float));
    int32_t *labels = zeroed(TRAIN_STEP_LABELS_BYTES);
    float *logits = zeroed((size_t)N_TEST * CLASSES * sizeof(float));
    void *train_workspace = zeroed(TRAIN_STEP_WORKSPACE_BYTES);
    void *eval_workspace = zeroed(EVALUATE_WORKSPACE_BYTES);

    size_t steps = n_train / BATCH;
    double step_time = 0.0;
    for (int epoch = 0; epoch < epochs; epoch++) {
        double total = 0.0;
        for (size_t s = 0; s < steps; s++) {
            const int32_t *rows = order + (size_t)epoch * n_train + s * BATCH;
            for (int r = 0; r < BATCH; r++) {
                memcpy(x + r * FEATURES, train_x + (size_t)rows[r] * FEATURES,
                       FEATURES * sizeof(float));
                labels[r] = train_y[rows[r]];
            }
            double start = seconds();
            int status = train_step(x, labels, w[0], w[1], w[2], w[3], loss, grad[0], grad[1],
                                    grad[2], grad[3], train_workspace);
            step_time += seconds() - start;
            if (status != 0) {
                fprintf(stderr, "train_step failed: %s\n", train_step_error_string(status));
                return 1;
            }
            total += *loss;
            for (int k = 0; k < N_PARAMS; k++) {
                for (size_t i = 0; i < sizes[k]; i++) {
                    velocity[k][i] = MOMENTUM * velocity[k][i] - LEARNING_RATE * grad[k][i];
                    w[k][i] = w[k][i] + velocity[k][i];
                }
            }
        }
        printf("epoch %3d  mean loss %.4f\n", epoch + 1, total / steps);
    }
    int status = evaluate(test_x, w[0], w[1], w[2], w[3], logits, eval_workspace);
    if (status != 0) {
        fprintf(stderr, "evaluate failed: %s\n", evaluate_error_string(status));
        return 1;
    }
    int correct = 0;
    for (int n = 0; n < N_TEST; n++) {
        int best = 0;
        for (int c = 1; c < CLASSES; c++)
            if (logits[n * CLASSES + c] > logits[n * CLASSES + best]) best = c;
        correct += best == test_y[n];
    }
    printf("test accuracy %.4f (%d/%d)\n", (double)correct / N_TEST, correct, N_TEST);
    if (epochs > 0 && steps > 0)
        printf("train_step: %.1f us per call\n", 1e6 * step_time / (epochs * (double)steps));
    return 0;
}
