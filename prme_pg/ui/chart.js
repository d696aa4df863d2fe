// confidence_base and reinforcement_boost along a memory's journal, one point per
// record (x: the record's place in the chain, labelled with its time), drawn as SVG.
// The values hold from one record to the next, so the lines are steps.

const SVG = "http://www.w3.org/2000/svg";
const W = 640;
const H = 260;
const PAD = { left: 44, right: 40, top: 14, bottom: 44 };

function el(name, attrs = {}, text) {
  const node = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

export function renderChart(container, records, titleId) {
  const points = records.filter((r) => r.confidence_base !== null && r.reinforcement_boost !== null);
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-labelledby": titleId, focusable: "false" });
  const desc = el("desc", {}, describe(points));
  svg.append(desc);
  const plotW = W - PAD.left - PAD.right;
  const plotH = H - PAD.top - PAD.bottom;
  const x = (i) => PAD.left + (points.length <= 1 ? plotW / 2 : (i * plotW) / (points.length - 1));
  const y = (v) => PAD.top + plotH * (1 - v);

  for (const tick of [0, 0.25, 0.5, 0.75, 1]) {
    svg.append(el("line", { x1: PAD.left, x2: W - PAD.right, y1: y(tick), y2: y(tick), stroke: "#d0d7de" }));
    svg.append(el("text", { x: PAD.left - 6, y: y(tick) + 4, "text-anchor": "end", "font-size": 11, fill: "#57606a" }, tick));
  }
  if (points.length === 0) {
    svg.append(el("text", { x: W / 2, y: H / 2, "text-anchor": "middle", fill: "#57606a" }, "No readable records"));
    container.replaceChildren(svg);
    return;
  }
  const labelEvery = Math.max(1, Math.ceil(points.length / 6));
  points.forEach((p, i) => {
    if (i % labelEvery !== 0 && i !== points.length - 1) return;
    const at = x(i);
    svg.append(el("line", { x1: at, x2: at, y1: PAD.top + plotH, y2: PAD.top + plotH + 4, stroke: "#8c959f" }));
    svg.append(el("text", { x: at, y: H - 26, "text-anchor": "middle", "font-size": 11, fill: "#1b1f24" }, `v${p.node_version}`));
    svg.append(el("text", { x: at, y: H - 12, "text-anchor": "middle", "font-size": 10, fill: "#57606a" }, shortTime(p.recorded_at)));
  });
  const series = [
    { key: "confidence_base", stroke: "#0b5cad", dash: "" },
    { key: "reinforcement_boost", stroke: "#8250df", dash: "6 4" },
  ];
  for (const { key, stroke, dash } of series) {
    let d = "";
    points.forEach((p, i) => {
      const value = Number(p[key]);
      d += i === 0 ? `M${x(i)},${y(value)}` : `H${x(i)}V${y(value)}`;
    });
    svg.append(el("path", { d, fill: "none", stroke, "stroke-width": 2.5, "stroke-dasharray": dash, "data-series": key }));
    points.forEach((p, i) => {
      const broken = p.problems.length > 0;
      const mark = broken
        ? el("rect", { x: x(i) - 5, y: y(Number(p[key])) - 5, width: 10, height: 10, fill: "#b3261e" })
        : el("circle", { cx: x(i), cy: y(Number(p[key])), r: 3.5, fill: stroke });
      mark.append(el("title", {}, `v${p.node_version} ${p.op}: ${key} ${p[key]}${broken ? " (does not verify)" : ""}`));
      svg.append(mark);
    });
  }
  container.replaceChildren(svg);
}

function shortTime(iso) {
  return iso ? iso.slice(5, 16).replace("T", " ") : "";
}

function describe(points) {
  if (points.length === 0) return "No journal record could be read.";
  const first = points[0];
  const last = points[points.length - 1];
  return (
    `${points.length} records from ${first.recorded_at} to ${last.recorded_at}: confidence_base from ` +
    `${first.confidence_base} to ${last.confidence_base}, reinforcement_boost from ` +
    `${first.reinforcement_boost} to ${last.reinforcement_boost}.`
  );
}
