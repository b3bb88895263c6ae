/* runner report: draws a report page's charts from its JSON block (#report-data). The timeline
 * is SVG made here; series and scatters are uPlot (inlined before this script). Nothing is
 * fetched: the page's Content-Security-Policy forbids it. When everything is drawn the body
 * gets data-rendered="yes"; an error is shown in #report-error instead. The charts are left in
 * window.runnerReport for scripts (the tests drive zoom and hover through them). */
(function () {
  "use strict";

  const errorBox = document.getElementById("report-error");
  function fail(error) {
    errorBox.hidden = false;
    errorBox.textContent = "A chart could not be drawn: " + ((error && error.message) || error);
    document.body.setAttribute("data-rendered", "error");
  }
  window.addEventListener("error", (event) => fail(event.error || event.message));

  /** The timeline's lane labels and the memory chart's left axis are as wide, and so are the
   * space right of the timeline and the chart's right axis: both plots span the same pixels. */
  const GUTTER = 90;
  const RIGHT = 50;
  const SVG = "http://www.w3.org/2000/svg"; // the SVG namespace name (an identifier, never fetched)
  const BYTE_UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];

  function fmtBytes(bytes) {
    if (bytes == null || isNaN(bytes)) return "-";
    let value = Math.abs(bytes);
    let unit = 0;
    while (value >= 1024 && unit < BYTE_UNITS.length - 1) {
      value /= 1024;
      unit++;
    }
    const digits = unit === 0 ? String(Math.round(value))
      : value >= 100 ? value.toFixed(0) : value >= 10 ? value.toFixed(1) : value.toFixed(2);
    return (bytes < 0 ? "-" : "") + digits + " " + BYTE_UNITS[unit];
  }

  function pad2(n) {
    return (n < 10 ? "0" : "") + n;
  }

  function fmtMs(ms) {
    if (ms == null) return "-";
    if (ms < 1000) return (ms < 10 && ms % 1 ? ms.toFixed(2) : Math.round(ms)) + " ms";
    if (ms < 10000) return (ms / 1000).toFixed(2) + " s";
    if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
    if (ms < 3600000) return Math.floor(ms / 60000) + " min " + pad2(Math.floor(ms / 1000) % 60) + " s";
    return Math.floor(ms / 3600000) + " h " + pad2(Math.floor(ms / 60000) % 60) + " min";
  }

  function fmtPct(fraction, signed) {
    if (fraction == null || isNaN(fraction)) return "-";
    const text = (fraction * 100).toFixed(Math.abs(fraction) < 0.1 ? 1 : 0) + "%";
    return signed && fraction > 0 ? "+" + text : text;
  }

  function escapeText(text) {
    return String(text).replace(/[&<>"']/g, (c) => "&#" + c.charCodeAt(0) + ";");
  }

  function el(tag, attrs, parent) {
    const node = document.createElementNS(SVG, tag);
    for (const name in attrs) node.setAttribute(name, attrs[name]);
    if (parent) parent.appendChild(node);
    return node;
  }

  /** A step between ticks of about `target` ticks over `range`: 1, 2 or 5 × 10^k. */
  function niceStep(range, target) {
    const rough = range / Math.max(1, target);
    const pow = Math.pow(10, Math.floor(Math.log10(rough || 1)));
    for (const m of [1, 2, 5, 10]) if (m * pow >= rough) return m * pow;
    return 10 * pow;
  }

  /** A time axis label for `ms` with ticks `step` ms apart. */
  function tickLabel(ms, step) {
    if (step >= 60000) {
      const s = Math.round(ms / 1000);
      return Math.floor(s / 60) + ":" + pad2(s % 60);
    }
    const decimals = Math.max(0, -Math.floor(Math.log10(step / 1000)));
    return (ms / 1000).toFixed(decimals) + " s";
  }

  function widthOf(node, fallback) {
    return Math.max(320, node.clientWidth || fallback || 960);
  }

  /** Rebuilds run on window resize (debounced). */
  const resizers = [];
  let resizeTimer = null;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => resizers.forEach((f) => f()), 150);
  });

  // ----- the timeline -------------------------------------------------------------------------

  /**
   * Draws the timeline into `host`: bars on worker lanes, or bands on step lanes. Returns
   * `{setRange(min, max)}` in ms; `onRange(min, max)` is called when the user zooms it.
   */
  function timeline(host, tl, steps, onRange) {
    const bars = tl.kind === "bars";
    const lanes = bars ? tl.lanes : tl.bands.length;
    const laneH = Math.max(2, Math.min(bars ? 26 : 48, Math.floor((bars ? 480 : 400) / Math.max(1, lanes))));
    const axisH = 22;
    const plotH = lanes * laneH;
    const end = Math.max(1, tl.end_ms);
    let view = [0, end];
    let width = widthOf(host);
    let plotW = width - GUTTER - RIGHT;

    host.innerHTML = "";
    host.style.position = "relative";
    const svg = el("svg", { class: "timeline", width: width, height: plotH + axisH });
    host.appendChild(svg);
    const tip = document.createElement("div");
    tip.className = "tip";
    tip.hidden = true;
    host.appendChild(tip);

    // Lanes: stripes and labels.
    const labels = el("g", { class: "lanes" }, svg);
    const every = Math.ceil(12 / laneH);
    for (let lane = 0; lane < lanes; lane++) {
      if (lane % 2 === 1) el("rect", { x: GUTTER, y: lane * laneH, width: plotW, height: laneH, class: "stripe" }, labels);
      if (lane % every !== 0) continue;
      const text = el("text", { x: GUTTER - 6, y: lane * laneH + Math.min(laneH, 12) * 0.5 + 4, class: "lane-label" }, labels);
      text.textContent = bars ? "worker " + lane : steps[tl.bands[lane].step].name;
    }
    const plot = el("svg", { x: GUTTER, y: 0, width: plotW, height: plotH, class: "plot" }, svg);
    el("rect", { x: 0, y: 0, width: plotW, height: plotH, class: "backdrop" }, plot);
    const marks = el("g", {}, plot);
    const axis = el("g", { class: "axis", transform: "translate(" + GUTTER + "," + plotH + ")" }, svg);
    const brush = el("rect", { class: "brush", x: 0, y: 0, width: 0, height: plotH, visibility: "hidden" }, plot);

    let layout;
    let describe;
    if (bars) {
      const n = tl.start.length;
      const rects = new Array(n);
      const fragment = document.createDocumentFragment();
      for (let i = 0; i < n; i++) {
        const r = document.createElementNS(SVG, "rect");
        r.setAttribute("class", tl.failed[i] ? "bar failed" : "bar");
        r.setAttribute("y", tl.worker[i] * laneH + (laneH > 4 ? 1 : 0));
        r.setAttribute("height", Math.max(1, laneH - (laneH > 4 ? 2 : 0)));
        r.setAttribute("fill", steps[tl.step[i]].color);
        r.setAttribute("data-i", i);
        rects[i] = r;
        fragment.appendChild(r);
      }
      marks.appendChild(fragment);
      layout = (scale) => {
        for (let i = 0; i < n; i++) {
          rects[i].setAttribute("x", ((tl.start[i] - view[0]) * scale).toFixed(1));
          rects[i].setAttribute("width", Math.max(2, tl.wall[i] * scale).toFixed(1));
        }
      };
      describe = (event) => {
        const i = event.target.getAttribute && event.target.getAttribute("data-i");
        if (i == null) return null;
        const k = +i;
        const ratio = tl.estimate[k] > 0 ? " (" + fmtPct(tl.peak[k] / tl.estimate[k]) + " of it)" : "";
        return "<b>" + escapeText(steps[tl.step[k]].name) + "</b> " + escapeText(tl.key[k]) +
          (tl.failed[k] ? " <span class=\"bad\">failed</span>" : "") +
          "<br>worker " + tl.worker[k] + " · start " + fmtMs(tl.start[k]) + " · wall " + fmtMs(tl.wall[k]) +
          (tl.attempts[k] > 1 ? " · " + tl.attempts[k] + " attempts" : "") +
          "<br>estimate " + fmtBytes(tl.estimate[k]) + " · peak " + fmtBytes(tl.peak[k]) + ratio;
      };
    } else {
      const workers = Math.max(1, tl.workers);
      const paths = tl.bands.map((band, lane) => {
        const color = steps[band.step].color;
        const outer = el("path", { class: "band", fill: color, "fill-opacity": 0.35 }, marks);
        const inner = el("path", { class: "band-busy", fill: color }, marks);
        let most = 1;
        for (const t of band.tasks) if (t > most) most = t;
        return { band, lane, outer, inner, most };
      });
      layout = (scale) => {
        const first = Math.max(0, Math.floor(view[0] / tl.bin_ms));
        const last = Math.min(tl.bins - 1, Math.ceil(view[1] / tl.bin_ms));
        const x = (bin) => ((bin * tl.bin_ms - view[0]) * scale).toFixed(1);
        for (const p of paths) {
          const base = (p.lane + 1) * laneH - 1;
          const h = laneH - 2;
          let outer = "M" + x(first) + "," + base;
          let inner = outer;
          for (let b = first; b <= last; b++) {
            const yo = (base - h * p.band.tasks[b] / p.most).toFixed(1);
            const yi = (base - h * Math.min(1, p.band.busy_ms[b] / tl.bin_ms / workers)).toFixed(1);
            outer += "L" + x(b) + "," + yo + "L" + x(b + 1) + "," + yo;
            inner += "L" + x(b) + "," + yi + "L" + x(b + 1) + "," + yi;
          }
          outer += "L" + x(last + 1) + "," + base + "Z";
          inner += "L" + x(last + 1) + "," + base + "Z";
          p.outer.setAttribute("d", outer);
          p.inner.setAttribute("d", inner);
        }
      };
      describe = (event, px, py) => {
        const lane = Math.floor(py / laneH);
        const p = paths[lane];
        if (!p) return null;
        const t = view[0] + px * (view[1] - view[0]) / plotW;
        const b = Math.min(tl.bins - 1, Math.max(0, Math.floor(t / tl.bin_ms)));
        return "<b>" + escapeText(steps[p.band.step].name) + "</b><br>" + fmtMs(b * tl.bin_ms) + " – " +
          fmtMs((b + 1) * tl.bin_ms) + ": " + p.band.tasks[b].toLocaleString("en") + " tasks ran" +
          "<br>workers busy with it: " + (p.band.busy_ms[b] / tl.bin_ms).toFixed(2) + " of " + workers;
      };
    }

    function drawAxis() {
      axis.innerHTML = "";
      el("line", { x1: 0, x2: plotW, y1: 0, y2: 0, class: "axis-line" }, axis);
      const step = niceStep(view[1] - view[0], plotW / 90);
      const scale = plotW / (view[1] - view[0]);
      for (let t = Math.ceil(view[0] / step) * step; t <= view[1]; t += step) {
        const x = (t - view[0]) * scale;
        el("line", { x1: x, x2: x, y1: 0, y2: 4, class: "tick" }, axis);
        const label = el("text", { x: x, y: 16, class: "tick-label" }, axis);
        label.textContent = tickLabel(t, step);
      }
    }

    function redraw() {
      layout(plotW / (view[1] - view[0]));
      drawAxis();
    }

    function setRange(min, max) {
      const lo = Math.max(0, min);
      const hi = Math.min(end, max);
      view = hi - lo >= 1 ? [lo, hi] : [0, end];
      redraw();
    }

    // Hover and brush.
    let dragFrom = null;
    const pointer = (event) => {
      const box = plot.getBoundingClientRect();
      return [event.clientX - box.left, event.clientY - box.top];
    };
    plot.addEventListener("mousedown", (event) => {
      if (event.button !== 0) return;
      dragFrom = pointer(event)[0];
      brush.setAttribute("visibility", "visible");
      brush.setAttribute("x", dragFrom);
      brush.setAttribute("width", 0);
      event.preventDefault();
    });
    window.addEventListener("mousemove", (event) => {
      if (dragFrom == null) return;
      const x = Math.max(0, Math.min(plotW, pointer(event)[0]));
      brush.setAttribute("x", Math.min(x, dragFrom));
      brush.setAttribute("width", Math.abs(x - dragFrom));
    });
    window.addEventListener("mouseup", (event) => {
      if (dragFrom == null) return;
      const x = Math.max(0, Math.min(plotW, pointer(event)[0]));
      const from = dragFrom;
      dragFrom = null;
      brush.setAttribute("visibility", "hidden");
      if (Math.abs(x - from) < 4) return;
      const scale = (view[1] - view[0]) / plotW;
      const min = view[0] + Math.min(x, from) * scale;
      const max = view[0] + Math.max(x, from) * scale;
      setRange(min, max);
      onRange(view[0], view[1]);
    });
    plot.addEventListener("dblclick", () => {
      setRange(0, end);
      onRange(0, end);
    });
    plot.addEventListener("mousemove", (event) => {
      if (dragFrom != null) return;
      const [px, py] = pointer(event);
      const html = describe(event, px, py);
      if (!html) {
        tip.hidden = true;
        return;
      }
      tip.innerHTML = html;
      tip.hidden = false;
      const left = Math.min(GUTTER + px + 14, width - tip.offsetWidth - 4);
      tip.style.left = Math.max(0, left) + "px";
      tip.style.top = (py + 14) + "px";
    });
    plot.addEventListener("mouseleave", () => {
      tip.hidden = true;
    });

    resizers.push(() => {
      width = widthOf(host);
      plotW = width - GUTTER - RIGHT;
      svg.setAttribute("width", width);
      plot.setAttribute("width", plotW);
      for (const node of plot.querySelectorAll(".backdrop")) node.setAttribute("width", plotW);
      for (const node of labels.querySelectorAll(".stripe")) node.setAttribute("width", plotW);
      redraw();
    });
    redraw();
    return { setRange, range: () => view.slice() };
  }

  // ----- uPlot helpers ------------------------------------------------------------------------

  /** Room for an axis's longest label (uPlot asks with the labels it is about to draw). */
  function labelRoom(u, values) {
    let longest = 0;
    for (const v of values || []) longest = Math.max(longest, String(v).length);
    return Math.max(50, longest * 8 + 20);
  }

  function bytesAxis(scale, side, size) {
    return {
      scale: scale,
      side: side,
      size: size || labelRoom,
      grid: { show: side !== 1 },
      values: (u, splits) => splits.map(fmtBytes),
    };
  }

  function line(label, color, extra) {
    return Object.assign({ label: label, stroke: color, width: 1.5, scale: "bytes", value: (u, v) => fmtBytes(v) }, extra);
  }

  /** uPlot in `host`, kept at the host's width. */
  function chart(host, opts, data, heightPx) {
    opts.width = widthOf(host, 900);
    opts.height = heightPx || 260;
    const plot = new uPlot(opts, data, host);
    if (window.runnerReport && window.runnerReport.charts) window.runnerReport.charts.push(plot);
    resizers.push(() => plot.setSize({ width: widthOf(host, 900), height: opts.height }));
    return plot;
  }

  /**
   * Categories 0..n-1 on x, labelled by `labels`: the x scale, series and axis of a chart, new
   * objects at each call (uPlot keeps its state in the options it is given).
   */
  function ordinalX(labels, ids) {
    return {
      get scale() {
        return { time: false, distr: 2 };
      },
      get series() {
        return {
          label: "cycle",
          value: (u, v) => (v == null || labels[v] == null ? "-" : labels[v] + (ids ? " (run " + ids[v] + ")" : "")),
        };
      },
      get axis() {
        return { space: 120, values: (u, splits) => splits.map((i) => (labels[i] == null ? "" : labels[i])) };
      },
    };
  }

  /**
   * Whether a chart shows the line `name` (of `values`) from the start: not when it is more than
   * 4× every one of `figures`, which it would flatten to nothing; a note before `host` says so.
   */
  function startsShown(host, name, values, figures) {
    let highest = 0;
    for (const series of figures) for (const v of series) if (v > highest) highest = v;
    let top = 0;
    for (const v of values) if (v > top) top = v;
    if (top <= 4 * highest) return true;
    const note = document.createElement("p");
    note.className = "note starts-hidden";
    note.textContent = "The " + name + " line (" + fmtBytes(top) + " at most) starts hidden: it is " +
      Math.round(top / Math.max(1, highest)) + "× the highest figure. Click “" + name + "” in the legend to show it.";
    host.parentNode.insertBefore(note, host);
    return false;
  }

  // ----- the run page -------------------------------------------------------------------------

  function runPage(data) {
    let memoryPlot = null;
    let syncing = false;
    const tlHost = document.getElementById("timeline-chart");
    const tl = timeline(tlHost, data.timeline, data.steps, (min, max) => {
      if (!memoryPlot) return;
      syncing = true;
      memoryPlot.setScale("x", { min: min / 1000, max: max / 1000 });
      syncing = false;
    });
    const memHost = document.getElementById("memory-chart");
    if (memHost && data.memory.t.length > 0) {
      memoryPlot = memoryChart(memHost, data, (min, max) => {
        if (!syncing) tl.setRange(min * 1000, max * 1000);
      });
      syncing = true;
      memoryPlot.setScale("x", { min: 0, max: data.memory.end_ms / 1000 });
      syncing = false;
    }
    window.runnerReport = { timeline: tl, memory: memoryPlot };
  }

  function memoryChart(host, data, onRange) {
    const m = data.memory;
    const t = m.t.map((ms) => ms / 1000);
    const budget = t.map(() => m.budget);
    const ratio = window.devicePixelRatio || 1;
    const spills = data.events;
    // Spilled bytes add up over the run (they are not in memory): they may dwarf the rest.
    const inMemory = [m.reserved, m.live, m.rss, m.resident, m.external];
    const budgetShown = startsShown(host, "budget", [m.budget], inMemory);
    const spilledShown = startsShown(host, "spilled", m.spilled, inMemory.concat([budgetShown ? [m.budget] : []]));
    // A sample is written when a figure moved: until the next one it stayed where it was.
    const held = { paths: uPlot.paths.stepped({ align: 1 }), points: { show: false } };
    const opts = {
      scales: { x: { time: false }, bytes: { range: (u, min, max) => [0, Math.max(1, max) * 1.05] }, tasks: { range: (u, min, max) => [0, Math.max(1, max) * 1.1] } },
      series: [
        { label: "time", value: (u, v) => (v == null ? "-" : fmtMs(v * 1000)) },
        line("budget", "#c62828", { dash: [8, 4], show: budgetShown, points: { show: false } }),
        line("reserved", "#1f5fa8", Object.assign({ fill: "rgba(31,95,168,0.08)" }, held)),
        line("live heap", "#2e7d32", held),
        line("RSS", "#7b1fa2", held),
        line("resident buffers", "#ef6c00", held),
        line("spilled", "#6d4c41", Object.assign({ dash: [3, 3], show: spilledShown }, held)),
        line("external", "#00838f", held),
        Object.assign({ label: "running tasks", scale: "tasks", stroke: "#b0b0b0", width: 1, fill: "rgba(0,0,0,0.035)" }, held),
      ],
      axes: [
        { values: (u, splits) => splits.map((s) => tickLabel(s * 1000, (splits[1] - splits[0]) * 1000 || 1000)) },
        bytesAxis("bytes", 3, GUTTER),
        { scale: "tasks", side: 1, size: RIGHT, grid: { show: false } },
      ],
      cursor: { drag: { x: true, y: false } },
      hooks: {
        setScale: [(u, key) => {
          if (key === "x") onRange(u.scales.x.min, u.scales.x.max);
        }],
        draw: [(u) => {
          if (!spills.length) return;
          const ctx = u.ctx;
          const top = u.bbox.top;
          const bottom = top + u.bbox.height;
          ctx.save();
          ctx.fillStyle = "#d84315";
          ctx.strokeStyle = "rgba(216,67,21,0.35)";
          ctx.lineWidth = ratio;
          for (const e of spills) {
            const x = u.valToPos(e.t_ms / 1000, "x", true);
            if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
            ctx.beginPath();
            ctx.moveTo(x, top);
            ctx.lineTo(x, bottom);
            ctx.stroke();
            ctx.beginPath();
            ctx.moveTo(x - 5 * ratio, top);
            ctx.lineTo(x + 5 * ratio, top);
            ctx.lineTo(x, top + 8 * ratio);
            ctx.closePath();
            ctx.fill();
          }
          ctx.restore();
        }],
      },
    };
    return chart(host, opts, [t, budget, m.reserved, m.live, m.rss, m.resident, m.spilled, m.external, m.running], 320);
  }

  // ----- the recipe page ----------------------------------------------------------------------

  function recipePage(data) {
    window.runnerReport = { charts: [] };
    const runs = data.runs;
    const x = runs.cycle.map((_, i) => i);
    const ord = ordinalX(runs.cycle, runs.run_id);
    const runsHost = document.getElementById("runs-chart");
    const budgetShown = startsShown(runsHost, "budget", runs.budget, [runs.peak_rss, runs.peak_reserved]);
    chart(runsHost, {
      title: "wall time and peak memory",
      scales: { x: ord.scale, s: { range: (u, min, max) => [0, Math.max(0.001, max) * 1.1] }, bytes: { range: (u, min, max) => [0, Math.max(1, max) * 1.05] } },
      series: [
        ord.series,
        { label: "wall", scale: "s", stroke: "#333", width: 2, value: (u, v) => (v == null ? "-" : fmtMs(v * 1000)), points: { show: true } },
        line("peak RSS", "#7b1fa2", { points: { show: true } }),
        line("peak reserved", "#1f5fa8", { points: { show: true } }),
        line("budget", "#c62828", { dash: [8, 4], show: budgetShown }),
      ],
      axes: [ord.axis, { scale: "s", values: (u, splits) => splits.map((s) => fmtMs(s * 1000)), size: labelRoom }, bytesAxis("bytes", 1)],
    }, [x, runs.wall_ms.map((ms) => (ms == null ? null : ms / 1000)), runs.peak_rss, runs.peak_reserved, runs.budget]);
    chart(document.getElementById("runs-learning-chart"), learningOpts("all tasks: slack and under-estimates", ord),
      [x, runs.slack, runs.under_rate], 220);

    data.steps.forEach((step, i) => {
      const bytesHost = document.getElementById("step-" + i + "-bytes");
      const learningHost = document.getElementById("step-" + i + "-learning");
      const scatterHost = document.getElementById("step-" + i + "-scatter");
      chart(bytesHost, {
        title: "estimate against peak",
        scales: { x: ord.scale, bytes: { range: (u, min, max) => [0, Math.max(1, max) * 1.05] } },
        series: [
          ord.series,
          line("estimate p50", "#1f5fa8", { width: 2, points: { show: true } }),
          line("estimate max", "#1f5fa8", { dash: [4, 3] }),
          line("peak p50", "#e15759", { width: 2, points: { show: true } }),
          line("peak max", "#e15759", { dash: [4, 3] }),
        ],
        axes: [ord.axis, bytesAxis("bytes", 3)],
      }, [x, step.estimate_p50, step.estimate_max, step.peak_p50, step.peak_max]);
      chart(learningHost, learningOpts("slack and under-estimates", ord), [x, step.slack, step.under_rate]);
      scatter(scatterHost, step);
    });
  }

  function learningOpts(title, ord) {
    return {
      title: title,
      scales: { x: ord.scale, pct: { range: (u, min, max) => [Math.min(0, min) * 1.1, Math.max(0.01, max) * 1.1] } },
      series: [
        ord.series,
        { label: "slack", scale: "pct", stroke: "#1f5fa8", width: 2, points: { show: true }, value: (u, v) => fmtPct(v, true) },
        { label: "under-estimated", scale: "pct", stroke: "#e15759", width: 2, points: { show: true }, value: (u, v) => fmtPct(v) },
      ],
      axes: [ord.axis, { scale: "pct", size: labelRoom, values: (u, splits) => splits.map((v) => fmtPct(v, true)) }],
    };
  }

  /** Which of a scatter's bases is worth plotting first: one that varies, the plugin's first. */
  function defaultBasis(sc) {
    const varies = (values) => {
      let seen = null;
      for (const v of values) {
        if (v == null) return false;
        if (seen == null) seen = v;
        else if (v !== seen) return true;
      }
      return false;
    };
    if (varies(sc.plugin)) return "plugin";
    if (varies(sc.input)) return "input";
    return sc.plugin.every((v) => v != null) ? "plugin" : "input";
  }

  function scatter(host, step) {
    const sc = step.scatter;
    const wrap = host;
    const pick = document.createElement("select");
    pick.className = "basis";
    for (const [value, label] of [["plugin", "x: the plugin's estimate"], ["input", "x: input bytes"]]) {
      const option = document.createElement("option");
      option.value = value;
      option.textContent = label;
      pick.appendChild(option);
    }
    pick.value = defaultBasis(sc);
    wrap.appendChild(pick);
    const area = document.createElement("div");
    wrap.appendChild(area);
    let plot = null;
    const points = (color) => ({ show: true, space: 0, size: 5, fill: color, stroke: color });
    const draw = () => {
      const xs = pick.value === "plugin" ? sc.plugin : sc.input;
      const order = [];
      for (let i = 0; i < xs.length; i++) if (xs[i] != null) order.push(i);
      order.sort((a, b) => xs[a] - xs[b]);
      const last = (i) => sc.run[i] === sc.last_run;
      const data = [
        order.map((i) => xs[i]),
        order.map((i) => (last(i) ? null : sc.peak[i])),
        order.map((i) => (last(i) ? sc.peak[i] : null)),
        order.map((i) => (last(i) ? sc.estimate[i] : null)),
      ];
      if (plot) plot.destroy();
      area.innerHTML = "";
      plot = new uPlot({
        title: "peak against " + (pick.value === "plugin" ? "the plugin's estimate" : "input bytes") + " (" + order.length + " tasks)",
        width: widthOf(wrap, 300),
        height: 260,
        scales: { x: { time: false }, bytes: { range: (u, min, max) => [0, Math.max(1, max) * 1.05] } },
        series: [
          { label: pick.value === "plugin" ? "plugin estimate" : "input", value: (u, v) => fmtBytes(v) },
          line("peak, earlier runs", "#9e9e9e", { paths: () => null, points: points("rgba(120,120,120,0.55)") }),
          line("peak, last run", "#e15759", { paths: () => null, points: points("#e15759") }),
          line("estimate, last run", "#1f5fa8", { paths: () => null, points: points("#1f5fa8") }),
        ],
        axes: [{ values: (u, splits) => splits.map(fmtBytes), space: 70 }, bytesAxis("bytes", 3)],
      }, data, area);
    };
    pick.addEventListener("change", draw);
    resizers.push(() => plot && plot.setSize({ width: widthOf(wrap, 300), height: 260 }));
    draw();
  }

  // ----- start --------------------------------------------------------------------------------

  try {
    const data = JSON.parse(document.getElementById("report-data").textContent);
    if (typeof uPlot === "undefined") throw new Error("the inlined uPlot did not load");
    if (data.page === "run") runPage(data);
    else if (data.page === "recipe") recipePage(data);
    else throw new Error("unknown page kind " + data.page);
    if (document.body.getAttribute("data-rendered") !== "error") document.body.setAttribute("data-rendered", "yes");
  } catch (error) {
    fail(error);
  }
})();
