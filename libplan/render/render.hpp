#pragma once
// Pictures of a predicted plan for people (`hetplan show --format svg|html`).
//
// svg() draws, top to bottom:
//  - the title and the summary numbers (iteration time, tokens/s, MFU, bubble, load balance);
//  - the cluster: one band per subcluster, its nodes as boxes wrapped in rows, every device a
//    small square coloured by the stage it serves (grey when unused), with a legend; the
//    pipeline order as one arrow per stage hop of every pipeline, from the middle of a
//    stage's devices to the next stage's (red when the hop leaves the subcluster; each pair
//    of subclusters a hop crosses is labelled once with its link's bandwidth and latency);
//  - the simulated timeline of one iteration: one lane per stage (data-parallel pipelines of
//    identical layout share their lanes), with rows for forwards, backwards and transfers
//    (activations sent on, gradients sent back, gradient sync), idle time as the grey left
//    uncovered, and on the right the stage's idle share and peak memory against capacity.
// Operations closer than a pixel are merged, so a lane stays compact for any number of
// micro-batches, and cells shrink with the device count (readable from 8 to ~1000 devices).
//
// html() is a page holding the same SVG, the summary and a stage table.
//
// Both are pure functions of the outcome (the same outcome gives the same text), and
// self-contained: no scripts, no external fonts, images or links. Every name that comes from
// the inputs is escaped. Devices, hops and lanes carry class and data-* attributes
// (class="device" data-stage="p0 s1", class="hop", class="lane") so tests can count them,
// and <title> elements so a browser shows details on hover.
//
// Precondition: `outcome` comes from predict::predict() with Options::trace set (the
// timeline is drawn from the trace; without it the lanes are empty).
#include <string>

#include "predict/predict.hpp"

namespace het::render {

// A standalone SVG document (with its XML declaration).
std::string svg(const predict::Outcome& outcome);
// A standalone HTML page embedding the SVG.
std::string html(const predict::Outcome& outcome);

// Text escaped for XML and HTML content and attribute values (&, <, >, ", '); control
// characters that XML cannot hold become U+FFFD.
std::string escape(const std::string& text);

}  // namespace het::render
