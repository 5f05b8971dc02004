#!/usr/bin/env python3
"""LIBLINEAR's -s 5 training time inside one process (no process start, no
file reading): liblinear.so.4 (Debian liblinear4, which liblinear-tools
brings) through ctypes, with the options compare_liblinear.sh gives
liblinear-train (-s 5 -c C -B 1, its default eps 0.01).

Usage: bench/liblinear_train_time.py C REPEATS TRAIN TEST [TRAIN TEST ...]
Each (TRAIN, TEST) pair of LIBLINEAR text files is one fold: the fold's
training runs REPEATS times and its fastest time counts. Prints one JSON
object: the mean over folds of that time (train_s), the held-out accuracy
and the mean non-zero weights (bias excluded), which must match what
liblinear-train / liblinear-predict give for the same files."""
import ctypes, ctypes.util, json, sys, time


class FeatureNode(ctypes.Structure):
    _fields_ = [("index", ctypes.c_int), ("value", ctypes.c_double)]


class Problem(ctypes.Structure):
    _fields_ = [("l", ctypes.c_int), ("n", ctypes.c_int), ("y", ctypes.POINTER(ctypes.c_double)),
                ("x", ctypes.POINTER(ctypes.POINTER(FeatureNode))), ("bias", ctypes.c_double)]


class Parameter(ctypes.Structure):  # liblinear 2.3's layout (linear.h)
    _fields_ = [("solver_type", ctypes.c_int), ("eps", ctypes.c_double), ("C", ctypes.c_double),
                ("nr_weight", ctypes.c_int), ("weight_label", ctypes.POINTER(ctypes.c_int)),
                ("weight", ctypes.POINTER(ctypes.c_double)), ("p", ctypes.c_double),
                ("init_sol", ctypes.POINTER(ctypes.c_double))]


def load_lib():
    for name in ("liblinear.so.4", ctypes.util.find_library("linear")):
        if name:
            try:
                return ctypes.CDLL(name)
            except OSError:
                pass
    sys.exit("liblinear.so.4 not found (apt-get install liblinear-tools)")


def read(path):
    rows, ys, n = [], [], 0
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                continue
            try:
                ys.append(float(parts[0]))
                feats = [(int(i), float(v)) for i, v in (p.split(":") for p in parts[1:])]
            except ValueError as e:
                sys.exit(f"{path}:{lineno}: {e}")
            rows.append(feats)
            n = max([n] + [i for i, _ in feats])
    return rows, ys, n


def nodes(feats, n, bias):
    arr = (FeatureNode * (len(feats) + 2))()
    for k, (i, v) in enumerate(feats):
        arr[k] = FeatureNode(i, v)
    k = len(feats)
    if bias >= 0:
        arr[k] = FeatureNode(n + 1, bias)
        k += 1
    arr[k] = FeatureNode(-1, 0.0)
    return arr


def main():
    if len(sys.argv) < 5 or len(sys.argv) % 2 == 0:
        sys.exit(__doc__)
    c, repeats, files = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    lib = load_lib()
    libc = ctypes.CDLL(None)
    lib.train.restype = ctypes.c_void_p
    lib.train.argtypes = [ctypes.POINTER(Problem), ctypes.POINTER(Parameter)]
    lib.predict.restype = ctypes.c_double
    lib.predict.argtypes = [ctypes.c_void_p, ctypes.POINTER(FeatureNode)]
    lib.get_decfun_coef.restype = ctypes.c_double
    lib.get_decfun_coef.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    lib.free_and_destroy_model.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    quiet = ctypes.CFUNCTYPE(None, ctypes.c_char_p)(lambda s: None)
    lib.set_print_string_function(quiet)
    bias = 1.0
    times, right, total, nnz = [], 0, 0, 0
    for train_path, test_path in zip(files[0::2], files[1::2]):
        rows, ys, n = read(train_path)
        keep = [nodes(r, n, bias) for r in rows]
        prob = Problem(len(rows), n + 1, (ctypes.c_double * len(ys))(*ys),
                       (ctypes.POINTER(FeatureNode) * len(keep))(
                           *[ctypes.cast(a, ctypes.POINTER(FeatureNode)) for a in keep]), bias)
        param = Parameter(5, 0.01, c, 0, None, None, 0.1, None)
        best, model = float("inf"), None
        for _ in range(repeats):
            if model:
                lib.free_and_destroy_model(ctypes.byref(ctypes.c_void_p(model)))
            # -s 5 visits the coordinates in rand() order: the state a fresh
            # liblinear-train process starts from (glibc's seed 1).
            libc.srand(1)
            t0 = time.perf_counter()
            model = lib.train(ctypes.byref(prob), ctypes.byref(param))
            best = min(best, time.perf_counter() - t0)
        times.append(best)
        # Label order: the first training label is LIBLINEAR's class 0, whose
        # weights get_decfun_coef returns; non-zeros do not depend on the sign.
        nnz += sum(lib.get_decfun_coef(model, j, 0) != 0 for j in range(1, n + 1))
        trows, tys, _ = read(test_path)
        for r, y in zip(trows, tys):
            right += lib.predict(model, nodes([(i, v) for i, v in r if i <= n], n, bias)) == y
            total += 1
        lib.free_and_destroy_model(ctypes.byref(ctypes.c_void_p(model)))
    folds = len(times)
    print(json.dumps({"C": c, "folds": folds, "repeats": repeats, "train_s": sum(times) / folds,
                      "cv_accuracy": right / total, "mean_nnz": nnz / folds}))


if __name__ == "__main__":
    main()
