/* GuideLoom report page: draws the inline JSON of guideloom.reporting.report (no network, no library). */
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var COLOURS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7"];
  var OPS = { write: "#4e79a7", append: "#59a14f", overwrite: "#e15759", rollback: "#b07aa1" };

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) { if (attrs[k] !== null && attrs[k] !== undefined) e.setAttribute(k, attrs[k]); }
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function sv(tag, attrs, text) {
    var e = document.createElementNS(SVG, tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = String(text);
    return e;
  }
  function num(n) { return n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"); }
  function human(n) {
    var units = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return i === 0 ? n + " B" : n.toFixed(1) + " " + units[i];
  }
  function pct(x) { return (100 * x).toFixed(2) + "%"; }

  function cards(parent, items) {
    var dl = el("dl", { "class": "gl-cards" });
    items.forEach(function (it) {
      if (it.value === null || it.value === undefined) return;
      var box = el("div", { "class": "gl-card" });
      box.appendChild(el("dt", {}, it.label));
      var dd = el("dd", { "data-total": it.key, "data-value": it.raw === undefined ? it.value : it.raw,
                          "class": it.small ? "gl-small" : null, title: it.title || null }, it.value);
      box.appendChild(dd);
      dl.appendChild(box);
    });
    parent.appendChild(dl);
  }

  function table(parent, head, rows, attrs) {
    var t = el("table", attrs || {});
    var tr = el("tr");
    head.forEach(function (h) { tr.appendChild(el("th", { "class": h.num ? "gl-num" : null }, h.label)); });
    t.appendChild(el("thead")).appendChild(tr);
    var body = el("tbody");
    rows.forEach(function (r) {
      var row = el("tr", r.attrs || {});
      r.cells.forEach(function (c, i) { row.appendChild(el("td", { "class": head[i].num ? "gl-num" : null }, c)); });
      body.appendChild(row);
    });
    t.appendChild(body);
    parent.appendChild(t);
    return t;
  }

  function coverage(h) {
    if (!h || h.shards === undefined) return "";
    return h.exact ? " (every shard)" : " (a sample: " + num(h.shards_read) + " of " + num(h.shards) + " shards, spread evenly)";
  }

  function histogram(parent, name, h, xlabel, fmt) {
    var box = el("div", { "class": "gl-figure", "data-figure": name, "data-n": h.n, "data-min": h.min, "data-max": h.max });
    parent.appendChild(box);
    if (!h.counts || !h.counts.length) { box.appendChild(el("p", { "class": "gl-note" }, "nothing to draw")); return; }
    var W = 720, H = 180, L = 56, B = 34, T = 10, R = 12;
    var svg = sv("svg", { viewBox: "0 0 " + W + " " + H, width: W, height: H, role: "img",
                          "aria-label": name + " histogram" });
    var top = Math.max.apply(null, h.counts) || 1, bw = (W - L - R) / h.counts.length;
    h.counts.forEach(function (c, i) {
      var bh = (H - B - T) * c / top;
      var r = sv("rect", { "class": "gl-bar", x: L + i * bw + 1, y: H - B - bh, width: Math.max(bw - 2, 1), height: bh,
                           "data-count": c, "data-lo": h.edges[i], "data-hi": h.edges[i + 1] });
      r.appendChild(sv("title", {}, num(c) + " in [" + fmt(h.edges[i]) + ", " + fmt(h.edges[i + 1]) + ")"));
      svg.appendChild(r);
    });
    svg.appendChild(sv("line", { "class": "gl-axis", x1: L, y1: H - B, x2: W - R, y2: H - B }));
    svg.appendChild(sv("line", { "class": "gl-axis", x1: L, y1: T, x2: L, y2: H - B }));
    svg.appendChild(sv("text", { x: L - 4, y: T + 8, "text-anchor": "end" }, num(top)));
    svg.appendChild(sv("text", { x: L - 4, y: H - B, "text-anchor": "end" }, "0"));
    svg.appendChild(sv("text", { x: L, y: H - B + 14 }, fmt(h.edges[0])));
    svg.appendChild(sv("text", { x: W - R, y: H - B + 14, "text-anchor": "end" }, fmt(h.edges[h.edges.length - 1])));
    svg.appendChild(sv("text", { x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle" }, xlabel));
    box.appendChild(svg);
  }

  function timeline(parent, hist) {
    var snaps = hist.snapshots;
    var box = el("div", { "class": "gl-figure", "data-figure": "timeline", "data-snapshots": snaps.length,
                          "data-expired": hist.expired });
    parent.appendChild(box);
    var left = hist.expired ? 110 : 30, step = 110, W = Math.max(left + snaps.length * step + 20, 300), H = 120, y = 60;
    var svg = sv("svg", { viewBox: "0 0 " + W + " " + H, width: W, height: H, role: "img", "aria-label": "snapshot timeline" });
    if (hist.expired) {
      var g = sv("g", { "data-expired-count": hist.expired });
      g.appendChild(sv("rect", { x: 4, y: y - 16, width: 86, height: 32, rx: 4, fill: "#eaeef2", stroke: "#afb8c1",
                                 "stroke-dasharray": "4 3" }));
      g.appendChild(sv("text", { x: 47, y: y + 4, "text-anchor": "middle" }, num(hist.expired) + " expired"));
      svg.appendChild(g);
    }
    var xs = {};
    snaps.forEach(function (s, i) { xs[s.id] = left + i * step + step / 2; });
    svg.appendChild(sv("line", { "class": "gl-axis", x1: left, y1: y, x2: left + snaps.length * step, y2: y }));
    snaps.forEach(function (s) {
      if (s.source && xs[s.source] !== undefined) {
        var x0 = xs[s.id], x1 = xs[s.source];
        svg.appendChild(sv("path", { d: "M" + x0 + " " + (y - 12) + " C " + x0 + " " + (y - 50) + ", " + x1 + " " + (y - 50) + ", " + x1 + " " + (y - 12),
                                     fill: "none", stroke: OPS.rollback, "stroke-width": 2, "stroke-dasharray": "5 3",
                                     "data-rollback-to": s.source }));
      }
    });
    snaps.forEach(function (s) {
      var x = xs[s.id];
      var g = sv("g", { "class": "gl-snap", "data-snapshot": s.id, "data-operation": s.operation,
                        "data-tokens": s.tokens, "data-records": s.records, "data-current": s.current ? "true" : "false" });
      g.appendChild(sv("circle", { cx: x, cy: y, r: s.current ? 11 : 8, fill: OPS[s.operation] || "#888" }));
      g.appendChild(sv("text", { x: x, y: y + 28, "text-anchor": "middle" }, "#" + s.sequence + " " + s.operation + (s.current ? " *" : "")));
      g.appendChild(sv("text", { x: x, y: y + 42, "text-anchor": "middle" }, num(s.tokens) + " tok"));
      g.appendChild(sv("title", {}, s.id + "  " + s.time + "  " + s.operation + (s.source ? " of " + s.source : "")));
      svg.appendChild(g);
    });
    box.appendChild(svg);
    table(parent, [{ label: "snapshot" }, { label: "time" }, { label: "operation" }, { label: "records", num: 1 },
                   { label: "tokens", num: 1 }, { label: "shards", num: 1 }, { label: "+shards", num: 1 }, { label: "−shards", num: 1 }],
          snaps.map(function (s) {
            return { attrs: { "data-snapshot-row": s.id },
                     cells: [s.id + (s.current ? " (shown)" : ""), s.time, s.operation + (s.source ? " to " + s.source : ""),
                             num(s.records), num(s.tokens), num(s.shards), num(s.added_shards), num(s.removed_shards)] };
          }));
  }

  function windows(parent, d) {
    var legend = el("p", { "class": "gl-caption gl-legend" });
    legend.appendChild(el("span", {}, "one box per token"));
    legend.appendChild(el("span", { "class": "gl-tok gl-tok--start" }, "record start"));
    legend.appendChild(el("span", { "class": "gl-tok gl-tok--masked" }, "loss_mask 0 (dimmed)"));
    legend.appendChild(el("span", { "class": "gl-tok gl-tok--span" }, "inside a span"));
    parent.appendChild(legend);
    d.windows.forEach(function (w) {
      var box = el("div", { "class": "gl-window", "data-window-index": w.index });
      if (w.document !== undefined) {
        box.appendChild(el("div", { "class": "gl-window-head" }, "document " + num(w.index)));
        box.appendChild(el("div", { "class": "gl-doc" }, w.document));
        parent.appendChild(box);
        return;
      }
      var shown = w.tokens.length < w.length ? " (first " + num(w.tokens.length) + " shown)" : "";
      box.appendChild(el("div", { "class": "gl-window-head" },
        "window " + num(w.index) + ": " + num(w.length) + " tokens" + shown + ", " + w.record_starts.length +
        " record start(s), " + w.spans.length + " span(s)" + (w.text ? "" : "; token ids")));
      var starts = {};
      w.record_starts.forEach(function (s) { starts[s] = true; });
      var inSpan = {};
      w.spans.forEach(function (s, k) { for (var t = s[0]; t < s[1]; t++) inSpan[t] = k; });
      var line = el("div", { "class": "gl-tokens" });
      w.tokens.forEach(function (id, t) {
        var cls = "gl-tok";
        var m = w.loss_mask ? w.loss_mask[t] : null;
        if (m === 0) cls += " gl-tok--masked";
        if (starts[t]) cls += " gl-tok--start";
        if (inSpan[t] !== undefined) cls += " gl-tok--span";
        var title = "token " + t + ": id " + id + (m === null ? "" : ", loss_mask " + m) +
                    (inSpan[t] !== undefined ? ", span " + w.spans[inSpan[t]][2] : "");
        line.appendChild(el("span", { "class": cls, "data-id": id, "data-loss-mask": m, "data-position": t, title: title },
                            w.text ? w.text[t] : String(id)));
      });
      box.appendChild(line);
      parent.appendChild(box);
    });
  }

  function dataset(root, d, index, mixed) {
    var sec = el("section", { "data-dataset": d.url, "data-dataset-index": index });
    root.appendChild(sec);
    sec.appendChild(el(mixed ? "h2" : "h1", {}, d.url));
    sec.appendChild(el("p", { "class": "gl-sub" }, d.storage_class + " · " + d.format.name + " (" + d.format.module + ") · snapshot " +
                                              d.snapshot + (d.snapshot !== d.current_snapshot ? " (not the current one, " + d.current_snapshot + ")" : " (current)")));
    var t = d.totals;
    var stream = d.layout !== "documents";
    cards(sec, [
      { key: "documents", label: "documents", value: t.documents === null ? null : num(t.documents), raw: t.documents },
      { key: "records", label: "records", value: num(t.records), raw: t.records },
      { key: "tokens", label: "tokens", value: stream ? num(t.tokens) : null, raw: t.tokens },
      { key: "spans", label: "spans", value: d.layout === "stream_with_meta" ? num(t.spans) : null, raw: t.spans },
      { key: "bytes", label: "size", value: human(t.bytes), raw: t.bytes, title: num(t.bytes) + " bytes" },
      { key: "shards", label: "shards", value: num(t.shards), raw: t.shards },
      { key: "parts", label: "parts", value: num(t.parts), raw: t.parts },
      { key: "layout", label: "layout", value: d.layout, small: true },
      { key: "tokenizer", label: "tokenizer", value: d.tokenizer || "not recorded", raw: d.tokenizer || "", small: true },
      { key: "sequence_length", label: "window", value: d.sequence_length ? num(d.sequence_length) + " tokens" : null,
        raw: d.sequence_length, small: true }
    ]);

    sec.appendChild(el("h3", {}, "Snapshot history"));
    timeline(sec, d.history);

    sec.appendChild(el("h3", {}, "Shard sizes"));
    histogram(sec, "shard-sizes", d.shard_sizes, "bytes per shard (all files)", function (x) { return human(Math.round(x)); });
    sec.appendChild(el("p", { "class": "gl-caption" }, num(d.shard_sizes.n) + " shards, " + human(d.shard_sizes.min) + " to " +
                                                       human(d.shard_sizes.max) + ", mean " + human(Math.round(d.shard_sizes.mean)) + coverage(d.shard_sizes)));
    if (d.record_lengths) {
      var r = d.record_lengths;
      sec.appendChild(el("h3", {}, "Record length"));
      histogram(sec, "record-lengths", r, r.unit + " per record", function (x) { return num(Math.round(x)); });
      sec.appendChild(el("p", { "class": "gl-caption" }, num(r.n) + " records, " + num(r.min) + " to " + num(r.max) + " " + r.unit +
                                                         ", mean " + (r.mean === null ? "–" : r.mean.toFixed(1)) + coverage(r)));
    }

    if (d.fields.length) {
      sec.appendChild(el("h3", {}, "Fields"));
      table(sec, [{ label: "field" }, { label: "dtype" }, { label: "values", num: 1 }, { label: "bytes", num: 1 }],
            d.fields.map(function (f) { return { attrs: { "data-field": f.name, "data-values": f.values, "data-bytes": f.bytes },
                                                 cells: [f.name, f.dtype, num(f.values), num(f.bytes)] }; }),
            { "data-figure": "fields" });
    }
    sec.appendChild(el("h3", {}, "Files"));
    table(sec, [{ label: "file" }, { label: "kind" }, { label: "bytes", num: 1 }],
          d.files.map(function (f) { return { attrs: { "data-file": f.name, "data-bytes": f.bytes }, cells: [f.name, "." + f.kind, num(f.bytes)] }; }),
          { "data-figure": "files" });

    if (d.loss_mask) {
      var lm = d.loss_mask;
      sec.appendChild(el("h3", {}, "Loss mask"));
      var p = el("p", { "data-figure": "loss-mask", "data-share": lm.share, "data-ones": lm.ones, "data-tokens": lm.tokens });
      p.appendChild(el("strong", {}, pct(lm.share)));
      p.appendChild(document.createTextNode(" of tokens have loss_mask 1 (" + num(lm.ones) + " of " + num(lm.tokens) + ")" + coverage(lm)));
      sec.appendChild(p);
      histogram(sec, "loss-mask-per-record", lm.per_record, "share of a record's tokens with loss_mask 1", function (x) { return pct(x); });
    }
    if (d.span_keys) {
      var sk = d.span_keys;
      sec.appendChild(el("h3", {}, "Spans per annotation key"));
      table(sec, [{ label: "key" }, { label: "spans", num: 1 }, { label: "share", num: 1 }],
            Object.keys(sk.keys).map(function (k) {
              return { attrs: { "data-key": k, "data-count": sk.keys[k] }, cells: [k, num(sk.keys[k]), sk.spans ? pct(sk.keys[k] / sk.spans) : "–"] };
            }), { "data-figure": "span-keys", "data-spans": sk.spans });
      sec.appendChild(el("p", { "class": "gl-caption" }, num(sk.spans) + " spans read of " + num(sk.total_spans) + coverage(sk)));
    }

    sec.appendChild(el("h3", {}, d.layout === "documents" ? "Documents" : "Windows"));
    windows(sec, d);

    if (d.requests) {
      var q = d.requests, s = q.settings;
      sec.appendChild(el("h3", {}, "Predicted requests per epoch"));
      table(sec, [{ label: "samples", num: 1 }, { label: "ranged GETs", num: 1 }, { label: "bytes", num: 1 }, { label: "bytes per GET", num: 1 }],
            [{ attrs: { "data-requests": q.requests, "data-bytes": q.bytes, "data-samples": q.samples },
               cells: [num(q.samples), num(q.requests), num(q.bytes), num(Math.round(q.bytes_per_request))] }],
            { "data-figure": "requests" });
      sec.appendChild(el("p", { "class": "gl-caption" }, "loader: batch_size " + s.batch_size + ", shuffle " + s.shuffle + ", seed " + s.seed +
                                                         ", world_size " + s.world_size + ", num_workers " + s.num_workers +
                                                         (s.sequence_length ? ", sequence_length " + s.sequence_length : "") +
                                                         " (guideloom estimate plays the loader's own order)"));
    }
    d.notes.forEach(function (n) { sec.appendChild(el("p", { "class": "gl-note" }, n)); });
  }

  function mixture(root, m) {
    var sec = el("section", { "data-figure": "mixture", "data-epoch-length": m.epoch_length });
    root.appendChild(sec);
    sec.appendChild(el("h1", {}, "Mixture of " + m.sources.length + " sources"));
    sec.appendChild(el("p", { "class": "gl-sub" }, "epoch: " + num(m.epoch_length) + " " + m.unit + " (" + m.stopping_strategy + ")" +
                                                   (m.sequence_length ? ", windows of " + num(m.sequence_length) + " tokens" : "")));
    var bar = el("div", { "class": "gl-share", role: "img", "aria-label": "shares per source" });
    m.sources.forEach(function (s, i) {
      bar.appendChild(el("div", { style: "width:" + (100 * s.share) + "%;background:" + COLOURS[i % COLOURS.length], title: s.url + " " + pct(s.share) }));
    });
    sec.appendChild(bar);
    table(sec, [{ label: "" }, { label: "source" }, { label: "weight", num: 1 }, { label: "share", num: 1 }, { label: m.unit, num: 1 },
                { label: "per epoch", num: 1 }, { label: "repeats", num: 1 }],
          m.sources.map(function (s, i) {
            return { attrs: { "data-source": s.url, "data-share": s.share, "data-per-epoch": s.per_epoch, "data-repeats": s.repeats, "data-samples": s.samples },
                     cells: ["■", s.url, s.weight, pct(s.share), num(s.samples), num(s.per_epoch), s.repeats.toFixed(3) + "×"] };
          }));
    var cells = sec.querySelectorAll("tbody tr td:first-child");
    for (var i = 0; i < cells.length; i++) cells[i].style.color = COLOURS[i % COLOURS.length];
  }

  function main() {
    var root = document.getElementById("gl-report");
    var data = JSON.parse(document.getElementById("gl-report-data").textContent);
    root.textContent = "";
    if (data.mixture) mixture(root, data.mixture);
    data.datasets.forEach(function (d, i) { dataset(root, d, i, !!data.mixture); });
    root.appendChild(el("p", { "class": "gl-caption" }, "guideloom " + data.guideloom_version + " · made " + data.generated));
    root.setAttribute("data-ready", "true");
  }
  main();
})();
