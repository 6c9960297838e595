#!/usr/bin/env python3
"""Draws plans with `hetplan show --format svg|html` and checks that a browser renders them.

  browser_render_check.py --hetplan BIN [PLAN...] [--sweep MODEL CLUSTER VARY]... [--keep DIR]

For each plan: the SVG must parse as XML; headless Chromium takes a screenshot of it and of
the HTML page; each PNG must exist, have the window's size, and not be blank: many colours,
a good share of non-white pixels, and the timeline's forward and backward colours and the
first stage's colour drawn as solid pixels. For each --sweep: `hetplan sweep --svg` of it (a
quick search per point), whose screenshot must show the iteration-time and tokens/s lines.
--keep DIR keeps the SVG, HTML and PNG files there (scripts/render-example.sh makes
docs/plan-example.* with it).

Exit status: 0 rendered, 1 a check failed, 77 no Chromium on this machine (ctest: skipped).
"""
import argparse
import collections
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
import zlib

SKIP = 77
FORWARD, BACKWARD = (0x4C, 0x78, 0xC8), (0xE8, 0x83, 0x3A)  # libplan/render's timeline colours
HTML_SIZE = (1320, 1700)
SWEEP_TIME, SWEEP_TOKENS = (0x4C, 0x78, 0xC8), (0xE8, 0x83, 0x3A)  # libplan/sweep's series colours


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def screenshot(chromium, url, png, width, height, home):
    """Headless Chromium's screenshot of url at width x height; the seconds it took."""
    args = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--disable-extensions", "--no-first-run", "--hide-scrollbars", "--mute-audio",
            "--force-device-scale-factor=1", "--user-data-dir=" + os.path.join(home, "profile"),
            "--screenshot=" + png, "--window-size=%d,%d" % (width, height), url]
    env = dict(os.environ, HOME=home, XDG_CONFIG_HOME=home, XDG_CACHE_HOME=home)
    start = time.monotonic()
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)
    except subprocess.TimeoutExpired:
        raise RuntimeError("chromium did not finish within 120 s: " + " ".join(args))
    if not os.path.exists(png):
        raise RuntimeError("chromium wrote no screenshot (exit %d): %s" % (r.returncode, r.stderr[-2000:]))
    return time.monotonic() - start


def read_png(path):
    """(width, height, rows of (r, g, b) tuples) of an 8-bit RGB or RGBA PNG, with zlib only."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(path + ": not a PNG")
    pos, idat, width = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or colour_type not in (2, 6) or interlace:
                raise ValueError("%s: unsupported PNG (depth %d, colour type %d, interlace %d)"
                                 % (path, depth, colour_type, interlace))
            bpp = 3 if colour_type == 2 else 4
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        pos += 12 + length
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    prev = bytearray(stride)
    rows = []
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif f == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif f == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif f == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prev[i], prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        elif f != 0:
            raise ValueError("%s: bad filter %d in row %d" % (path, f, y))
        rows.append(list(zip(line[0::bpp], line[1::bpp], line[2::bpp])))
        prev = line
    return width, height, rows


def check_png(path, width, height, must_have):
    w, h, rows = read_png(path)
    problems = []
    if (w, h) != (width, height):
        problems.append("%s is %dx%d, expected %dx%d" % (path, w, h, width, height))
    colours = collections.Counter()
    for row in rows:
        colours.update(row)
    total = w * h
    white = colours.get((255, 255, 255), 0)
    non_white = 1 - white / total
    if len(colours) < 12:
        problems.append("%s has only %d colours: blank or nearly" % (path, len(colours)))
    if non_white < 0.05:
        problems.append("%s is %.1f %% non-white: blank or nearly" % (path, 100 * non_white))
    for name, rgb in must_have.items():
        if colours.get(rgb, 0) < 20:
            problems.append("%s: the %s colour #%02x%02x%02x is not drawn" % ((path, name) + rgb))
    print("%s: %dx%d, %d colours, %.0f %% non-white" % (os.path.basename(path), w, h, len(colours), 100 * non_white))
    return problems


def hex_rgb(text):
    return tuple(int(text[i:i + 2], 16) for i in (1, 3, 5))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hetplan", required=True)
    ap.add_argument("--keep", help="keep the SVG, HTML and PNG files in this folder")
    ap.add_argument("--sweep", nargs=3, action="append", default=[], metavar=("MODEL", "CLUSTER", "VARY"))
    ap.add_argument("plans", nargs="*")
    a = ap.parse_args()
    if not a.plans and not a.sweep:
        ap.error("give plans or --sweep")
    chromium = find_chromium()
    if not chromium:
        print("SKIP: no chromium on PATH (apt-get install chromium; scripts/setup.sh installs it)")
        return SKIP
    work = tempfile.mkdtemp(prefix="het-render-")
    problems = []
    try:
        for plan in a.plans:
            base = os.path.basename(plan).replace(".plan.json", "").replace(".json", "")
            out = a.keep or work
            os.makedirs(out, exist_ok=True)
            svg, html = os.path.join(out, base + ".svg"), os.path.join(out, base + ".html")
            for fmt, path in (("svg", svg), ("html", html)):
                r = subprocess.run([a.hetplan, "show", plan, "--format", fmt, "-o", path], capture_output=True, text=True,
                                   timeout=120)
                if r.returncode != 0:
                    problems.append("hetplan show %s --format %s: exit %d: %s" % (plan, fmt, r.returncode, r.stderr))
            if problems:
                break
            root = ET.parse(svg).getroot()  # well-formed, or it raises
            width, height = int(float(root.get("width"))), int(float(root.get("height")))
            first_stage = None
            for el in root.iter("{http://www.w3.org/2000/svg}rect"):
                if el.get("class") == "device" and el.get("data-stage") not in (None, "unused"):
                    first_stage = hex_rgb(el.get("fill"))
                    break
            must = {"forward": FORWARD, "backward": BACKWARD, "first stage": first_stage}
            # The page has tables above the picture: its timeline may lie below the window.
            for path, size, want in ((svg, (width, height), must), (html, HTML_SIZE, {"first stage": first_stage})):
                png = path[:-len(os.path.splitext(path)[1])] + ("" if path == svg else "-html") + ".png"
                seconds = screenshot(chromium, "file://" + os.path.abspath(path), png, size[0], size[1],
                                     os.path.join(work, "home"))
                print("%s: chromium took %.1f s" % (os.path.basename(path), seconds))
                problems += check_png(png, size[0], size[1], want)
        for k, (model, cluster, vary) in enumerate(a.sweep):
            out = a.keep or work
            os.makedirs(out, exist_ok=True)
            svg = os.path.join(out, "sweep-%d.svg" % (k + 1))
            r = subprocess.run([a.hetplan, "sweep", "--model", model, "--cluster", cluster, "--vary", vary, "--svg", svg,
                                "--time-budget", "2"], capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                problems.append("hetplan sweep --vary %s: exit %d: %s" % (vary, r.returncode, r.stderr))
                break
            root = ET.parse(svg).getroot()
            width, height = int(float(root.get("width"))), int(float(root.get("height")))
            points = [el for el in root.iter("{http://www.w3.org/2000/svg}circle") if "point" in (el.get("class") or "")]
            if len(points) < 2:
                problems.append("%s: %d points drawn" % (svg, len(points)))
            png = svg[:-4] + ".png"
            seconds = screenshot(chromium, "file://" + os.path.abspath(svg), png, width, height, os.path.join(work, "home"))
            print("%s: chromium took %.1f s" % (os.path.basename(svg), seconds))
            problems += check_png(png, width, height, {"iteration time": SWEEP_TIME, "tokens/s": SWEEP_TOKENS})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for p in problems:
        print("FAILED: " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
