#!/usr/bin/env python3
"""The docker-compose stack's trainer: streams epochs from several batchd
daemons through batchd.Loader, and checks that every epoch delivered every
sample of the dataset exactly once.

Per epoch it prints the images, the wall time, images/s and the coverage
verdict; at the end the total images/s (over the epochs after the first,
which includes connecting and filling the pipeline) and the loader's
diagnosis. Exits 0 when every epoch's coverage was exact, 1 otherwise.

    compose_trainer.py --endpoints 127.0.0.1:7070,127.0.0.1:7072 \\
        --dataset demo --epochs 3

Outside a container, --build DIR finds the batchd module in DIR/python.

Coverage: the Loader yields (images, labels), not sample indices. The check
therefore needs a dataset with exactly one image per class (make_dataset
--images N --classes N), where a label names one sample: an epoch covers
every sample exactly once if and only if it yields each of the N labels
exactly once. The script checks that premise with ListDatasets before it
starts (N samples, N classes) and refuses a dataset without it;
--no-coverage streams any dataset without the check.
"""
import argparse
import collections
import pathlib
import sys
import time


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--endpoints", required=True,
                   help="comma-separated daemon addresses (host:port)")
    p.add_argument("--dataset", default="demo",
                   help="dataset name the daemons serve")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--size", type=int, default=224,
                   help="output height and width, pixels")
    p.add_argument("--prefetch", type=int, default=8,
                   help="ring slots (batches read ahead over all daemons)")
    p.add_argument("--step-ms", type=float, default=0.0,
                   help="simulated training step per batch, ms (0: none, "
                        "the trainer only consumes)")
    p.add_argument("--shuffle-window-shards", type=int, default=0,
                   help="tar-shard datasets: draw samples from a window of "
                        "this many shards (0: shuffle every sample)")
    p.add_argument("--job", default="compose-trainer",
                   help="job name in the daemons' metrics")
    p.add_argument("--connect-timeout", type=float, default=30.0,
                   help="seconds to wait for the daemons")
    p.add_argument("--tls-ca", help="PEM CA that signed the daemons' "
                   "certificates: connect with TLS (default: plaintext)")
    p.add_argument("--tls-server-name", help="name the daemons' "
                   "certificates are checked against (default: the host)")
    p.add_argument("--token-file", help="file holding the bearer token the "
                   "daemons require (default: $BATCHD_TOKEN, if set)")
    p.add_argument("--no-coverage", dest="coverage", action="store_false",
                   help="skip the exactly-once check (for datasets with "
                        "several images per class)")
    p.add_argument("--build", help="CMake build directory with python/ "
                                   "(when not installed)")
    return p.parse_args(argv)


def dataset_size(batchd, endpoints, name, timeout, security):
    """The sample count of `name`, after checking one image per class.
    Asks the daemons in turn until one answers."""
    errors = []
    for endpoint in endpoints:
        try:
            datasets = batchd.list_datasets(endpoint, timeout, **security)
            break
        except batchd.BatchdError as error:
            errors.append(f"{endpoint}: {error}")
    else:
        sys.exit("compose_trainer: no daemon answered ListDatasets: " +
                 "; ".join(errors))
    for dataset, samples, classes in datasets:
        if dataset != name:
            continue
        if samples != len(classes):
            sys.exit(f"compose_trainer: dataset {name!r} has {samples} "
                     f"samples in {len(classes)} classes; the coverage check "
                     f"needs one image per class (make_dataset --images N "
                     f"--classes N)")
        return samples
    sys.exit(f"compose_trainer: {endpoint} does not serve dataset {name!r}")


def check_coverage(seen, samples):
    """(exact, verdict): whether the label counts `seen` of one epoch are
    each of 0..samples-1 exactly once, and what was wrong if not."""
    missing = [i for i in range(samples) if seen[i] == 0]
    repeated = sorted(i for i, n in seen.items() if n > 1)
    unknown = sorted(i for i in seen if not 0 <= i < samples)
    if not (missing or repeated or unknown):
        return True, f"all {samples} samples exactly once"
    return False, (f"FAILED: {len(missing)} missing (first {missing[:5]}), "
                   f"{len(repeated)} repeated (first {repeated[:5]}), "
                   f"{len(unknown)} unknown labels")


def main(argv):
    args = parse_args(argv)
    if args.build:
        sys.path.insert(0, str(pathlib.Path(args.build).resolve() / "python"))
    import torch
    import batchd
    # The daemons decode; this process only receives. One thread keeps it
    # from competing with them for the cores.
    torch.set_num_threads(1)

    endpoints = [e.strip() for e in args.endpoints.split(",") if e.strip()]
    if not endpoints:
        sys.exit("compose_trainer: --endpoints is empty")
    security = dict(tls_ca=args.tls_ca, tls_server_name=args.tls_server_name,
                    token_file=args.token_file)
    samples = (dataset_size(batchd, endpoints, args.dataset,
                            args.connect_timeout, security)
               if args.coverage else None)
    # One Loader over every daemon: it spreads its requests over them and
    # asks another daemon for the batches of one that fails.
    loader = batchd.Loader(
        ",".join(endpoints), args.dataset, args.batch_size, size=args.size,
        prefetch=args.prefetch, seed=1, shuffle=True, drop_last=False,
        shuffle_window_shards=args.shuffle_window_shards,
        rank=0, world_size=1, job=args.job,
        connect_timeout=args.connect_timeout, report=False, **security)
    print(f"loader: one batchd.Loader over {len(endpoints)} daemons "
          f"({','.join(endpoints)})", flush=True)
    print(f"dataset {args.dataset}: {len(loader)} batches of "
          f"{args.batch_size}, {args.size}x{args.size} RandomResizedCrop + "
          f"flip, uint8", flush=True)

    ok = True
    steady_images, steady_s = 0, 0.0
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        seen = collections.Counter()
        images = 0
        started = time.perf_counter()
        for batch_images, labels in loader:
            seen.update(labels.tolist())
            images += batch_images.shape[0]
            if args.step_ms:
                time.sleep(args.step_ms / 1000)
            del batch_images
        elapsed = time.perf_counter() - started
        verdict = "not checked"
        if args.coverage:
            exact, verdict = check_coverage(seen, samples)
            ok = ok and exact
        print(f"epoch {epoch}: {images} images in {elapsed:.2f} s: "
              f"{images / elapsed:.1f} images/s; coverage {verdict}",
              flush=True)
        if epoch > 0 or args.epochs == 1:
            steady_images += images
            steady_s += elapsed

    if steady_s > 0:
        print(f"throughput: {steady_images / steady_s:.1f} images/s over "
              f"{steady_images} images"
              f"{' (epochs after the first)' if args.epochs > 1 else ''}",
              flush=True)
    print(f"diagnosis: {loader.epoch_diagnosis or loader.diagnose()}",
          flush=True)
    loader.close()
    if args.coverage:
        print(f"coverage: {'ok' if ok else 'FAILED'} over {args.epochs} "
              f"epochs", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
