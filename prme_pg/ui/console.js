// The review console: a small single-page app over the HTTP API. Pages live under
// /ui/ (the server answers every /ui/ path with this app); links change the page
// without a reload. Text from the server is only ever set as text, never as HTML.

import { ApiError, call, ownerOf, signIn, signOut, token, whenUnauthorized } from "./api.js";
import { renderChart } from "./chart.js";

const main = document.getElementById("main");
const statusRegion = document.getElementById("status");

// -- small DOM helpers -----------------------------------------------------------------

function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "class") node.className = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function say(message) {
  statusRegion.textContent = "";
  window.setTimeout(() => (statusRegion.textContent = message), 30);
}

function link(href, text, attrs = {}) {
  return h("a", { href, ...attrs }, text);
}

function time(iso) {
  if (!iso) return "—";
  return h("time", { datetime: iso }, iso.replace("T", " ").replace(/\.\d+/, "").replace("+00:00", "Z"));
}

function idWithCopy(id, what) {
  return h(
    "span",
    { class: "idcell" },
    h("code", { class: "id" }, id),
    h("button", { type: "button", class: "quiet small", "aria-label": `Copy ${what} ${id}`, "data-copy": id }, "Copy"),
  );
}

async function copy(text) {
  try {
    await navigator.clipboard.writeText(text);
    say("Copied to the clipboard");
  } catch {
    say("Copying was refused by the browser; select the id to copy it");
  }
}

function problemNotice(error) {
  const detail = error instanceof ApiError ? `${error.status}: ${error.message}` : String(error);
  return h("p", { class: "notice bad", role: "alert" }, detail);
}

function cell(label, ...content) {
  return h("td", { "data-label": label }, ...content);
}

function table(caption, headings, rows, { cards = true } = {}) {
  return h(
    "table",
    { class: cards ? "cards" : "" },
    h("caption", {}, caption),
    h("thead", {}, h("tr", {}, headings.map((name) => h("th", { scope: "col" }, name)))),
    h("tbody", {}, rows),
  );
}

function busy(region) {
  region.setAttribute("aria-busy", "true");
  region.replaceChildren(h("p", { class: "hint" }, "Loading…"));
}

function done(region, ...children) {
  region.removeAttribute("aria-busy");
  region.replaceChildren(...children);
}

// "1 memory", "2 memories": a count with its noun.
function count(n, one, many) {
  return `${n} ${n === 1 ? one : many}`;
}

function fmt(value) {
  return value === null || value === undefined ? "—" : String(value);
}

// -- navigation ------------------------------------------------------------------------

const routes = [
  [/^\/ui\/?$/, () => (token() ? go("/ui/memories", { replace: true }) : signInPage())],
  [/^\/ui\/sign-in$/, () => signInPage()],
  [/^\/ui\/memories$/, () => memoriesPage()],
  [/^\/ui\/memories\/([^/]+)$/, (id) => memoryPage(decodeURIComponent(id))],
  [/^\/ui\/maintenance$/, () => maintenancePage()],
  [/^\/ui\/inbox$/, () => inboxPage()],
];

export function go(path, { replace = false } = {}) {
  if (replace) history.replaceState(null, "", path);
  else history.pushState(null, "", path);
  return render();
}

async function render() {
  const path = window.location.pathname;
  const signedIn = Boolean(token());
  document.getElementById("nav").hidden = !signedIn;
  document.getElementById("who").hidden = !signedIn;
  document.getElementById("owner").textContent = signedIn ? `Signed in as ${ownerOf(token()) ?? "?"}` : "";
  for (const a of document.querySelectorAll("[data-nav]")) {
    if (path.startsWith(`/ui/${a.dataset.nav}`)) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  document.body.classList.add("ready");
  if (!signedIn && path !== "/ui/sign-in" && path !== "/ui/" && path !== "/ui") {
    return go("/ui/sign-in", { replace: true });
  }
  for (const [pattern, page] of routes) {
    const match = path.match(pattern);
    if (match) {
      await page(...match.slice(1));
      return;
    }
  }
  page("Page not found", h("p", {}, "No console page lives here. ", link("/ui/memories", "Go to the memories")));
}

function page(title, ...content) {
  document.title = `${title} · prme-pg review console`;
  const heading = h("h1", { tabindex: "-1" }, title);
  main.replaceChildren(heading, ...content);
  heading.focus({ preventScroll: true });
  return heading;
}

document.addEventListener("click", (event) => {
  const copyButton = event.target.closest?.("[data-copy]");
  if (copyButton) {
    copy(copyButton.dataset.copy);
    return;
  }
  const a = event.target.closest?.("a[href]");
  if (!a || event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey) return;
  const url = new URL(a.href, window.location.href);
  if (url.origin !== window.location.origin || !url.pathname.startsWith("/ui/")) return;
  event.preventDefault();
  go(url.pathname + url.search);
});
window.addEventListener("popstate", () => render());
whenUnauthorized(() => {
  signOut();
  go("/ui/sign-in?expired=1", { replace: true });
});
document.getElementById("sign-out").addEventListener("click", () => {
  signOut();
  say("Signed out");
  go("/ui/sign-in");
});

// -- the health strip ------------------------------------------------------------------

function pill(id, text, ok) {
  const node = document.getElementById(id);
  node.textContent = text;
  node.title = text;
  node.className = `pill ${ok === null ? "" : ok ? "ok" : "bad"}`;
}

async function refreshHealth() {
  try {
    const live = await call("GET", "/health", { auth: false });
    pill("health-live", `Server: ok (prme-pg ${live.version})`, true);
  } catch {
    pill("health-live", "Server: unreachable", false);
  }
  let ledgerServed = true;
  try {
    // Readiness needs no token and shows nothing of any owner (docs/HTTP.md).
    const ready = await call("GET", "/ready", { auth: false, allow: [503] });
    const ok = ready.status === "ready";
    // A memory pack (prme-pg serve --pack) is ready without a ledger: it has none.
    ledgerServed = !(ok && ready.capabilities && ready.capabilities.ledger === false);
    pill("health-ready", ok ? "Database: ready" : `Database: not ready (${ready.detail})`, ok);
  } catch (error) {
    pill("health-ready", `Database: ${error.message}`, false);
  }
  if (!ledgerServed) {
    pill("health-ledger", "Ledger: none on a memory pack", null);
    return;
  }
  if (!token()) {
    pill("health-ledger", "Ledger: sign in to see", null);
    return;
  }
  try {
    const ledger = await call("GET", "/api/v2/ledger");
    pill("health-ledger", `Ledger: ${ledger.pending} pending, ${ledger.blocked} blocked`, ledger.blocked === 0);
  } catch {
    pill("health-ledger", "Ledger: unknown", null);
  }
}

// -- sign in ---------------------------------------------------------------------------

function signInPage() {
  const expired = new URLSearchParams(window.location.search).has("expired");
  const message = h("div", { class: "region", id: "sign-in-message" });
  if (expired) message.append(h("p", { class: "notice bad" }, "The server refused the token: sign in again."));
  const input = h("input", {
    id: "token",
    name: "token",
    type: "password",
    autocomplete: "off",
    spellcheck: "false",
    required: true,
    "aria-describedby": "token-hint",
  });
  const form = h(
    "form",
    {
      onsubmit: async (event) => {
        event.preventDefault();
        const value = input.value.trim();
        input.value = "";
        signIn(value);
        try {
          // A route that needs a token and that both backends serve (a pack has no ledger).
          await call("GET", "/v1/nodes", { query: { limit: 1 }, signingIn: true });
        } catch (error) {
          signOut();
          const text = error instanceof ApiError && error.status === 401 ? "That token is not valid." : error.message;
          message.replaceChildren(h("p", { class: "notice bad", role: "alert" }, text));
          input.focus();
          return;
        }
        say(`Signed in as ${ownerOf(value)}`);
        refreshHealth();
        go("/ui/memories", { replace: true });
      },
    },
    h("div", { class: "field" }, h("label", { for: "token" }, "API token"), input),
    h(
      "p",
      { class: "hint", id: "token-hint" },
      "A token from prme-pg token create. It is kept in this browser tab only and sent only in the Authorization header.",
    ),
    h("div", {}, h("button", { type: "submit" }, "Sign in")),
  );
  page("Sign in", h("div", { class: "signin" }, form, message));
  if (!expired) input.focus();
}

// -- memories --------------------------------------------------------------------------

const STABILITIES = ["low", "semi-stable", "stable"];
const STATES = ["active", "contested", "superseded", "deprecated", "archived"];

function select(id, label, options, value) {
  return h(
    "div",
    { class: "field" },
    h("label", { for: id }, label),
    h(
      "select",
      { id, name: id },
      h("option", { value: "" }, "any"),
      options.map((o) => h("option", { value: o, selected: o === value }, o)),
    ),
  );
}

async function memoriesPage() {
  const params = new URLSearchParams(window.location.search);
  const results = h("div", { class: "region", id: "memory-results" });
  const form = h(
    "form",
    {
      class: "filters",
      role: "search",
      onsubmit: (event) => {
        event.preventDefault();
        const data = new FormData(event.target);
        const next = new URLSearchParams();
        for (const [key, value] of data) if (value) next.set(key, value);
        go(`/ui/memories${next.size ? `?${next}` : ""}`);
      },
    },
    h(
      "div",
      { class: "field grow" },
      h("label", { for: "q" }, "Search"),
      h("input", { id: "q", name: "q", type: "search", value: params.get("q") || "", "aria-describedby": "q-hint" }),
    ),
    h("div", { class: "field" }, h("label", { for: "scope" }, "Scope"), h("input", { id: "scope", name: "scope", value: params.get("scope") || "", size: 12 })),
    select("stability", "Stability", STABILITIES, params.get("stability")),
    select("lifecycle_state", "Lifecycle", STATES, params.get("lifecycle_state")),
    h("button", { type: "submit" }, "Search"),
  );
  page(
    "Memories",
    form,
    h("p", { class: "hint", id: "q-hint" }, "Memories with the most of your words first, then the closest in meaning (as recall finds them); every lifecycle state is searched. Empty: newest change first."),
    results,
  );
  busy(results);
  try {
    const found = await call("GET", "/v1/nodes", {
      query: {
        q: params.get("q"),
        scope: params.get("scope"),
        stability: params.get("stability"),
        lifecycle_state: params.get("lifecycle_state"),
        limit: 100,
      },
    });
    const rows = found.nodes.map((n) =>
      h(
        "tr",
        {},
        cell("Memory", link(`/ui/memories/${n.id}`, n.content)),
        cell("Id", idWithCopy(n.id, "memory id")),
        cell("Scope", n.scope),
        cell("Stability", n.stability),
        cell("Lifecycle", n.lifecycle_state),
        h("td", { class: "num", "data-label": "Confidence" }, fmt(n.confidence_base)),
        cell("Changed", time(n.updated_at)),
      ),
    );
    done(
      results,
      rows.length
        ? table(count(rows.length, "memory", "memories"), ["Memory", "Id", "Scope", "Stability", "Lifecycle", "Confidence", "Changed"], rows)
        : h("p", { class: "notice" }, "No memory matches."),
    );
  } catch (error) {
    done(results, problemNotice(error));
  }
}

// -- one memory ------------------------------------------------------------------------

const NODE_FIELDS = [
  "id", "scope", "namespace", "kind", "stability", "lifecycle_state", "confidence_base", "salience_base",
  "reinforcement_boost", "decay_profile", "last_reinforced_at", "next_review_at", "created_at", "updated_at", "version",
];

async function memoryPage(id) {
  // Everything is fetched first and the page is built once: nothing moves as data arrives.
  page("Memory", h("p", { class: "hint", "aria-busy": "true" }, "Loading the memory…"));
  const base = `/v1/nodes/${encodeURIComponent(id)}`;
  const [node, journal, outcomeList, summary, events] = await Promise.allSettled([
    call("GET", base),
    call("GET", `${base}/journal`, { query: { limit: 1000 } }),
    call("GET", `${base}/outcomes`, { query: { limit: 100 } }),
    call("GET", `${base}/outcomes/summary`),
    call("GET", `${base}/evidence`, { query: { limit: 100 } }),
  ]);
  if (node.status === "rejected") {
    const error = node.reason;
    if (error instanceof ApiError && (error.status === 404 || error.status === 422)) {
      page(
        "Memory not found",
        h("p", { class: "notice bad", role: "alert" }, "No memory of yours has this id."),
        h("p", {}, link("/ui/memories", "Back to the memories")),
      );
    } else {
      page("Memory", problemNotice(error));
    }
    return;
  }
  const n = node.value;
  const chart = h("div", { class: "chart", id: "memory-chart" });
  if (journal.status === "fulfilled") renderChart(chart, journal.value.records, "chart-title");
  page(
    n.content,
    h(
      "dl",
      { class: "fields", id: "memory-fields" },
      NODE_FIELDS.flatMap((name) => [
        h("dt", {}, name),
        h("dd", {}, name === "id" ? idWithCopy(n.id, "memory id") : name.endsWith("_at") ? time(n[name]) : fmt(n[name])),
      ]),
    ),
    h("h2", { id: "chart-title" }, "Confidence and reinforcement boost, record by record"),
    chart,
    h(
      "p",
      { class: "legend" },
      h("span", {}, h("span", { class: "key" }), "confidence_base"),
      h("span", {}, h("span", { class: "key boost" }), "reinforcement_boost"),
    ),
    h("h2", {}, "Journal"),
    h("div", { id: "memory-journal" }, journal.status === "fulfilled" ? journalView(journal.value) : problemNotice(journal.reason)),
    h(
      "div",
      { class: "columns" },
      h(
        "section",
        { "aria-labelledby": "outcomes-title" },
        h("h2", { id: "outcomes-title" }, "Outcomes"),
        outcomeList.status === "fulfilled"
          ? outcomesView(outcomeList.value.outcomes, summary.status === "fulfilled" ? summary.value : null)
          : problemNotice(outcomeList.reason),
      ),
      h(
        "section",
        { "aria-labelledby": "evidence-title" },
        h("h2", { id: "evidence-title" }, "Evidence"),
        events.status === "fulfilled" ? evidenceView(events.value.events) : problemNotice(events.reason),
      ),
    ),
  );
  document.title = `${n.content.slice(0, 60)} · prme-pg review console`;
}

function journalView(journal) {
  const broken = journal.records.filter((r) => r.problems.length > 0).length;
  const chainProblems = journal.problems.filter((p) => !journal.records.some((r) => r.node_version === p.node_version));
  const summary = journal.verified
    ? h("p", { class: "notice ok chain", id: "chain-status" }, `The chain verifies: ${count(journal.records.length, "record", "records")}, each checksum recomputed and each link checked; the memory points at the newest record.`)
    : h(
        "p",
        { class: "notice bad chain", id: "chain-status", role: "alert" },
        `The chain does not verify: ${broken} of ${count(journal.records.length, "record fails", "records fail")}` + (chainProblems.length ? `; ${chainProblems.map((p) => `${p.problem}: ${p.detail}`).join("; ")}` : "") + ".",
      );
  const extra = journal.complete ? null : h("p", { class: "hint" }, `Only the oldest ${journal.records.length} records are shown (of ${journal.version}).`);
  const items = [...journal.records].reverse().map((r) => {
    const ok = r.problems.length === 0;
    return h(
      "li",
      { class: ok ? "" : "broken", id: `record-${r.node_version}`, "data-version": r.node_version },
      h(
        "div",
        { class: "head" },
        h("strong", {}, `v${r.node_version} ${r.op}`),
        time(r.recorded_at),
        h("span", { class: `badge ${ok ? "verified" : "broken"}` }, ok ? "verified" : "does not verify"),
      ),
      h("div", {}, "checksum ", h("code", { class: "id" }, r.checksum)),
      h(
        "div",
        { class: "link" },
        r.prev_checksum ? ["links to ", h("code", { class: "id" }, r.prev_checksum)] : r.record_version === 1 ? "record version 1 (no link)" : "first record (no link)",
      ),
      ok ? null : h("ul", { class: "problems" }, r.problems.map((p) => h("li", {}, h("strong", {}, p.problem), `: ${p.detail}`))),
    );
  });
  return h("div", {}, summary, extra, h("ol", { class: "timeline", reversed: true, "aria-label": "Journal records, newest first" }, items));
}

function outcomesView(outcomes, summary) {
  const counts = summary
    ? h("p", {}, `${count(summary.outcomes, "outcome", "outcomes")}, score ${summary.score}, stability by outcomes ${summary.stability_by_outcomes}.`)
    : null;
  if (outcomes.length === 0) return h("div", {}, counts, h("p", { class: "hint" }, "No outcome recorded."));
  const rows = outcomes.map((o) =>
    h("tr", {}, cell("Outcome", o.outcome), h("td", { class: "num", "data-label": "Weight" }, fmt(o.weight)), cell("Recorded", time(o.created_at)), cell("Notes", fmt(o.notes))),
  );
  return h("div", {}, counts, table("Newest first", ["Outcome", "Weight", "Recorded", "Notes"], rows));
}

function evidenceView(events) {
  if (events.length === 0) return h("p", { class: "hint" }, "This memory cites no evidence.");
  return h(
    "ul",
    {},
    events.map((e) => h("li", {}, h("q", {}, e.content), " ", time(e.occurred_at), h("div", {}, idWithCopy(e.id, "event id")))),
  );
}

// -- maintenance -----------------------------------------------------------------------

async function maintenancePage() {
  const patchId = new URLSearchParams(window.location.search).get("patch");
  page("Maintenance", h("p", { class: "hint", "aria-busy": "true" }, "Loading the report…"));
  const [report, patch, active] = await Promise.allSettled([
    call("GET", "/v1/maintenance/report"),
    patchId ? call("GET", `/v1/maintenance/patches/${encodeURIComponent(patchId)}`) : Promise.resolve(null),
    // The report names memories by id; their text comes from the memories the report can list.
    call("GET", "/v1/nodes", { query: { lifecycle_state: ["active", "contested"], limit: 1000 } }),
  ]);
  const contents = new Map(active.status === "fulfilled" ? active.value.nodes.map((n) => [n.id, n.content]) : []);
  // The patch comes last, so generating one only adds below what is on the page.
  const patchRegion = h("div", { id: "patch" });
  if (patch.status === "rejected") patchRegion.append(problemNotice(patch.reason));
  else if (patch.value) patchRegion.append(patchView(patch.value, patchRegion));
  else patchRegion.append(h("p", { class: "hint" }, "Generate a patch to review the recommended changes op by op."));
  page(
    "Maintenance",
    h("h2", {}, "Report"),
    report.status === "fulfilled" ? reportView(report.value.recommendations, contents) : problemNotice(report.reason),
    h("h2", {}, "Patch"),
    h(
      "div",
      { class: "actions" },
      h("button", { type: "button", id: "generate-patch", onclick: () => generatePatch(patchRegion) }, "Generate a patch"),
    ),
    patchRegion,
  );
}

function reportView(recommendations, contents) {
  const rows = recommendations.map((r) =>
    h(
      "tr",
      {},
      cell(
        "Memory",
        link(`/ui/memories/${r.node_id}`, contents.get(r.node_id) || r.node_id),
        h("div", {}, h("code", { class: "id" }, r.node_id)),
      ),
      cell("Recommendations", r.recommendations.join(", ")),
      cell(
        "Stability",
        r.suggested_stability && r.suggested_stability !== r.stability ? `${r.stability} → ${r.suggested_stability}` : r.stability,
      ),
      cell(
        "Confidence",
        r.suggested_confidence !== null && r.suggested_confidence !== r.confidence_base
          ? `${r.confidence_base} → ${r.suggested_confidence}`
          : fmt(r.confidence_base),
      ),
      cell("Next review", time(r.next_review_at)),
      cell(
        "Outcomes since review",
        `${r.explicit_reinforcements} confirmed, ${r.implicit_successes} used, ${r.explicit_corrections} corrected`,
      ),
    ),
  );
  if (rows.length === 0) return h("p", { class: "notice ok" }, "Nothing needs maintenance.");
  return table(
    `${count(rows.length, "memory needs", "memories need")} attention`,
    ["Memory", "Recommendations", "Stability", "Confidence", "Next review", "Outcomes since review"],
    rows,
  );
}

async function generatePatch(region) {
  try {
    const created = await call("POST", "/v1/maintenance/patches", { body: {} });
    history.replaceState(null, "", `/ui/maintenance?patch=${created.patch_id}`);
    say(`Patch generated with ${count(created.ops.length, "op", "ops")}`);
    region.replaceChildren(patchView(created, region));
  } catch (error) {
    region.replaceChildren(problemNotice(error));
  }
}

async function showPatch(region, patchId, results) {
  try {
    const patch = await call("GET", `/v1/maintenance/patches/${encodeURIComponent(patchId)}`);
    region.replaceChildren(patchView(patch, region, results));
  } catch (error) {
    region.replaceChildren(problemNotice(error));
  }
}

function updatesList(updates) {
  return h(
    "ul",
    { class: "op-updates" },
    Object.entries(updates).map(([field, change]) => h("li", {}, `${field}: ${fmt(change.from)} → ${fmt(change.to)}`)),
  );
}

function patchView(patch, region, results) {
  const resultByOp = new Map((results || []).map((r) => [r.op_id, r]));
  const rows = patch.ops.map((op) => {
    const applied = op.status === "applied";
    const box = h("input", {
      type: "checkbox",
      id: `select-${op.op_id}`,
      name: "op",
      value: op.op_id,
      checked: op.default_selected && !applied,
      disabled: applied,
    });
    const result = resultByOp.get(op.op_id);
    return h(
      "tr",
      { "data-op": op.op_id, "data-status": op.status },
      cell("Select", box, h("label", { for: `select-${op.op_id}`, class: "visually-hidden" }, `Select ${op.op_id}: ${op.op} of ${op.target.node_id}`)),
      cell("Op", h("code", {}, op.op_id), h("div", {}, op.op)),
      cell("Memory", link(`/ui/memories/${op.target.node_id}`, op.target.content || op.target.node_id), h("div", {}, h("code", { class: "id" }, op.target.node_id))),
      cell("Change", updatesList(op.updates)),
      cell("Reason", op.reason),
      cell("Risk", h("span", { class: `badge ${op.risk}` }, op.risk), op.requires_review ? h("div", { class: "hint" }, "requires review") : null),
      cell(
        "Status",
        h("span", { class: `badge ${applied ? "applied" : ""}`, "data-status-of": op.op_id }, op.status),
        applied ? h("div", { class: "hint" }, op.applied_mode, " ", time(op.applied_at)) : null,
        result && result.status !== "applied" ? h("div", { class: "hint" }, `${result.status}${result.detail ? `: ${result.detail}` : ""}`) : null,
      ),
    );
  });
  const apply = async (mode) => {
    const selected = [...region.querySelectorAll("input[name=op]:checked")].map((b) => b.value);
    if (mode === "manual" && selected.length === 0) {
      say("Select at least one op to apply");
      return;
    }
    try {
      const answer = await call("POST", `/v1/maintenance/patches/${patch.patch_id}/apply`, {
        body: mode === "manual" ? { op_ids: selected, mode } : { op_ids: null, mode },
      });
      const counts = {};
      for (const r of answer.results) counts[r.status] = (counts[r.status] || 0) + 1;
      say(`Applied: ${Object.entries(counts).map(([k, v]) => `${v} ${k}`).join(", ") || "nothing"}`);
      await showPatch(region, patch.patch_id, answer.results);
    } catch (error) {
      region.prepend(problemNotice(error));
    }
  };
  return h(
    "div",
    {},
    h("p", {}, "Patch ", idWithCopy(patch.patch_id, "patch id"), " as of ", time(patch.as_of)),
    patch.ops.length
      ? h(
          "div",
          {},
          table(`${count(patch.ops.length, "op", "ops")}; the safe ones are selected`, ["Select", "Op", "Memory", "Change", "Reason", "Risk", "Status"], rows),
          h(
            "div",
            { class: "actions" },
            h("button", { type: "button", id: "apply-selected", onclick: () => apply("manual") }, "Apply selected"),
            h("button", { type: "button", id: "apply-safe", class: "quiet", onclick: () => apply("auto") }, "Apply safe ops"),
          ),
          h("p", { class: "hint" }, "Apply selected applies exactly the checked ops. Apply safe ops applies the decays and the increases that need no review, never a decrease or a contest."),
        )
      : h("p", { class: "notice ok" }, "The patch has no ops: nothing to apply."),
  );
}

// -- the correction inbox --------------------------------------------------------------

async function inboxPage() {
  const all = new URLSearchParams(window.location.search).has("all");
  page("Correction inbox", h("p", { class: "hint", "aria-busy": "true" }, "Loading the inbox…"));
  const list = h("div", { id: "inbox" });
  await loadInbox(list, all);
  page(
    "Correction inbox",
    h("p", {}, all ? link("/ui/inbox", "Show open entries only") : link("/ui/inbox?all=1", "Show resolved entries too")),
    list,
  );
}

async function loadInbox(list, all) {
  try {
    const { entries } = await call("GET", "/v1/corrections/inbox", { query: { include_resolved: all, max_count: 200 } });
    list.replaceChildren(
      ...(entries.length ? entries.map((e) => inboxEntry(e, list, all)) : [h("p", { class: "notice ok" }, "The inbox is empty.")]),
    );
  } catch (error) {
    list.replaceChildren(problemNotice(error));
  }
}

function inboxEntry(entry, list, all) {
  const choices = [...new Set([...entry.matched_node_ids, ...entry.candidate_node_ids])];
  const fieldId = `resolve-${entry.id}`;
  const resolve = async (nodeId) => {
    try {
      await call("POST", `/v1/corrections/inbox/${entry.id}/resolve`, { body: { node_id: nodeId } });
      say(nodeId ? "Linked to the memory" : "Dismissed");
      await loadInbox(list, all);
    } catch (error) {
      list.prepend(problemNotice(error));
    }
  };
  const input = h("input", { id: fieldId, name: "node_id", list: `${fieldId}-choices`, size: 38, class: "id" });
  return h(
    "article",
    { class: "inbox-entry", "data-entry": entry.id },
    h("p", {}, h("q", {}, entry.message)),
    h("p", { class: "hint" }, `${entry.reason === "ambiguous" ? "Matched several memories" : "Matched no memory"} · `, time(entry.created_at)),
    choices.length ? h("p", {}, "Candidates: ", choices.map((id) => h("span", {}, link(`/ui/memories/${id}`, id, { class: "id" }), " "))) : null,
    entry.resolution
      ? h("p", { class: "notice" }, `Resolved: ${entry.resolution}`, entry.resolved_node_id ? [" to ", h("code", { class: "id" }, entry.resolved_node_id)] : null)
      : h(
          "form",
          {
            onsubmit: (event) => {
              event.preventDefault();
              if (input.value.trim()) resolve(input.value.trim());
            },
          },
          h("div", { class: "field" }, h("label", { for: fieldId }, "Memory id to link"), input),
          h("datalist", { id: `${fieldId}-choices` }, choices.map((id) => h("option", { value: id }))),
          h("button", { type: "submit" }, "Link"),
          h("button", { type: "button", class: "quiet", onclick: () => resolve(null) }, "Dismiss"),
        ),
  );
}

// -- start -----------------------------------------------------------------------------

refreshHealth();
render();
