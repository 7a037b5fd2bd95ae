"""results.md of a benchmark call: its ceilings and loaders, one row per run, what was derived
(figures.py), the input pipelines, the GPU's clocks, the check and the long tests."""

import statistics

from benchmarks.figures import ok_runs

NAN = float("nan")


def _reason(v, n=160):
    return str(v.get("reason") or v.get("error", ""))[-n:].replace("|", "/").replace("\n", " ")


def parts(results):
    lines = []
    c = results.get("ceilings", {})
    if c.get("status") == "ok" and "copy_TBps" in c:
        lines.append(
            f"Ceilings: copy {c['copy_TBps']:.2f} TB/s (read + write), bf16 matmul "
            f"{c['bf16_matmul_TFLOPs']:.0f} TFLOP/s, TF32 matmul {c['tf32_matmul_TFLOPs']:.0f} TFLOP/s"
        )
    ld = results.get("loaders", {})
    if ld.get("status") == "ok":
        if "nvimgcodec_decode" in ld:
            lines.append(
                f"nvImageCodec decode {ld['nvimgcodec_decode']:.0f} images/s; vs torchvision's: "
                f"{ld['nvimgcodec_vs_torchvision_levels']}"
            )
        lines.append(
            f"Input alone (images/s, batch {ld['batch']}): nvJPEG decode {ld['nvjpeg_decode']:.0f}, "
            f"decode + augment {ld['decode_augment']:.0f}, GPU loader ({ld['gpu_loader_workers']} workers) "
            f"{ld['gpu_loader']:.0f}, CPU loader ({ld['cpu_loader_workers']} workers) {ld['cpu_loader']:.0f}"
            + (
                f", DALI ({ld['dali_loader_workers']} threads) {ld['dali_loader']:.0f}"
                if isinstance(ld.get("dali_loader"), float)
                else f"; DALI: {ld.get('dali_loader')}"
            )
        )
    cap = results.get("capacity", {})
    if cap.get("status") == "ok":
        lines.append(
            f"Node input capacity, no training ({cap['gpus']} processes at once, one a GPU, {cap['cpus']} CPUs; "
            f"{cap['warmup_batches']} batches warm-up, {cap['seconds']:.0f} s timed):"
        )
        for name, s in cap["settings"].items():
            node = f"{s['node_images_per_s']:.0f}" if s["node_images_per_s"] else "failed"
            each = ", ".join(f"{x:.0f}" if x else "-" for x in s["per_process"])
            lines.append(
                f"  {name} ({' '.join(s['flags'])}, {s['data']}): {node} images/s ({each}; "
                f"{node_per_cpu(s, cap['cpus'])}){' ' + _reason({'error': s['errors'][0]}) if s['errors'] else ''}"
            )
    if results.get("picked"):
        lines.append(f"Picked from the earlier call: {results['picked']}")
    return lines


def node_per_cpu(s, cpus):
    if not s["node_images_per_s"]:
        return "no rate"
    node, threads = s["node_images_per_s"], sum(t or 0 for t in s["threads"])
    return f"{node / cpus:.0f} a CPU of the node, {node / max(threads, 1):.0f} a decode thread"


def runs(results):
    lines = [
        "| run | GPUs | data | images/s | per GPU | step CV | median step ms | input wait | loss first→last | "
        "wall s | status |",
        "|" + "---|" * 11,
    ]
    for v in results["variants"]:
        if v.get("status") != "ok":
            lines.append(
                f"| {v['name']} | {v['gpus']} | {v['data']} | - | - | - | - | - | - | "
                f"{v.get('wall_s', 0):.0f} | {v.get('status')}: {_reason(v)} |"
            )
            continue
        timed = v["step_wall_s"][results["warmup_steps"] :]
        lines.append(
            f"| {v['name']} | {v['gpus']} | {v['data']} | {v['images_per_s']:.0f} | {v['per_gpu']:.0f} | "
            f"{v['step_cv']:.1%} | {1e3 * statistics.median(timed):.1f} | {v['input_wait_fraction']:.1%} | "
            f"{v['losses'][0]:.3f}→{v['losses'][-1]:.3f} | {v['wall_s']:.0f} | ok |"
        )
    return lines


def inputs(results):
    lines, ok = [], ok_runs(results)
    stages = [v for v in ok if "fetch_s" in (v.get("gpu_input") or {})]
    if stages:
        lines += [
            "",
            "GPU input thread, mean ms per batch during the timed steps (fetch bytes from the workers / "
            "nvJPEG call / augmentation launch):",
        ]
        lines += [
            f"- {v['name']}: {1e3 * v['gpu_input']['fetch_s']:.1f} / {1e3 * v['gpu_input']['decode_s']:.1f} / "
            f"{1e3 * v['gpu_input']['augment_launch_s']:.1f}"
            for v in stages
        ]
    dali = [v for v in ok if "decoder" in (v.get("gpu_input") or {})]
    if dali:
        lines += [
            "",
            "DALI pipelines (decoder, CPU threads, batches prefetched, hardware decoder share; mean ms "
            "per next() during the timed steps):",
        ]
        lines += [
            f"- {v['name']}: {g['decoder']}, {g['threads']} threads, prefetch {g['prefetch']}, "
            f"hw_decoder_load {g['hw_decoder_load']}; {1e3 * g.get('next_s', NAN):.2f} ms"
            for v in dali
            for g in [v["gpu_input"]]
        ]
    return lines


def clocks(results):
    with_clocks = [v for v in ok_runs(results) if v.get("gpu_clocks")]
    if not with_clocks:
        return []
    lines = [
        "",
        "| run | images/s | GPU power W | SM clock MHz (min) | GPU util | CPU steal (max) | samples | "
        "clock limited by | GPU / memory max C | time power / thermal limited (max) |",
        "|" + "---|" * 10,
    ]
    for v in with_clocks:
        c = v["gpu_clocks"]
        lim = ", ".join(f"{k} {x:.0%}" for k, x in c["limited"].items() if x) or "nothing"
        lines.append(
            f"| {v['name']} | {v['images_per_s']:.0f} | {c['power_W'] or NAN:.0f} | "
            f"{c['sm_clock_MHz']:.0f} ({c['sm_clock_min_MHz']:.0f}) | {c['util_percent'] or NAN:.0f}% | "
            f"{c.get('cpu_steal_percent') or 0:.1f}% ({c.get('cpu_steal_max_percent') or 0:.1f}%) | "
            f"{c['samples']} | {lim} | {c.get('gpu_temp_C_max', '-')} / {c.get('gpu_mem_temp_C_max', '-')} | "
            f"{c.get('gpu_power_limited_percent_max', NAN):.1f}% / "
            f"{c.get('gpu_thermal_limited_percent_max', NAN):.1f}% |"
        )
    return lines


def check(results):
    ck = results.get("check", {})
    if ck.get("status") != "ok":
        return []
    pre, dec, rsz = ck["preprocessing_levels"], ck["decode_levels"], ck["batched_resize_levels"]
    lines = [
        "",
        f"Check (batch {ck['batch']}, {ck['steps']} steps on one real batch): preprocessing GPU vs CPU "
        f"mean {pre['mean']:.2f} / p99 {pre['p99']:.2f} / max {pre['max']:.1f} levels (decoders alone: mean "
        f"{dec['mean']:.2f} / max {dec['max']:.0f}; batched float16 resize vs F.interpolate: mean "
        f"{rsz['mean']:.3f} / max {rsz['max']:.2f}); CPU fp32 losses " + ", ".join(f"{x:.4f}" for x in ck["cpu_fp32"]),
    ]
    for k, v in ck.items():
        if isinstance(v, dict) and "max_rel_diff" in v:
            lines.append(
                f"- {k}: max |loss - CPU loss| / first CPU loss {v['max_rel_diff']:.2e} "
                f"(tolerance {ck['tolerance'][k]:.0e}) {'ok' if v['within_tolerance'] else 'OUT OF TOLERANCE'}"
            )
    return lines


def long_tests(results):
    lines = []
    for t in results.get("long_tests", []):
        if t.get("status") != "ok":
            lines += ["", f"Long test {t['name']}: {t.get('status')}: {_reason(t, 300)}"]
            continue
        lines += [
            "",
            f"Long test {t['name']} (compile {t['settings'].get('compile') or 'off'}, input "
            f"{t['settings'].get('input')}; {t['long_test']['result']}; wall {t['wall_s']:.0f} s):",
            "",
            "| epoch | loss | lr | top-1 % | top-5 % | train images/s | train s | eval s |",
            "|" + "---|" * 8,
        ]
        lines += [
            f"| {e['epoch']} | {e['loss']:.4f} | {e['lr']:.4g} | {e['top1']} | {e['top5']} | "
            f"{e['train_images_per_s']:.0f} | {e['train_s']:.1f} | {e['eval_s']:.2f} |"
            for e in t["epochs_run"]
        ]
    return lines


def results_md(results):
    lines = [
        f"# {results['plan']} on {results.get('gpu', '?')}, {results['date']}",
        "",
        *parts(results),
        "",
        *runs(results),
        "",
    ]
    lines += [f"- {k}: {v}" for k, v in results.get("derived", {}).items()]
    for section in (inputs, clocks, check, long_tests):
        lines += section(results)
    return "\n".join(lines) + "\n"
