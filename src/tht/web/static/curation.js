/* The Recall quality page: a workspace's benchmark (cases, runs, the history chart),
 * the "Add cases" panel (a question tried as a case would be, the cards it should find)
 * and the gaps mined from what agents asked.
 *
 * Plain JavaScript, no build step, no library: the chart is SVG built element by
 * element. Data reaches the page through textContent only. Unsafe requests carry the
 * session's CSRF token, like app.js.
 */
(function () {
  "use strict";

  // static/dom.js's h, whose children may also be arrays of children
  function h(tag, attrs) {
    var children = [];
    for (var i = 2; i < arguments.length; i++) children = children.concat(arguments[i]);
    return window.ThothDom.h.apply(null, [tag, attrs].concat(children));
  }
  var clear = window.ThothDom.clear;
  var SVG = "http://www.w3.org/2000/svg";

  function $(id) { return document.getElementById(id); }
  function when(iso) { return iso ? window.ThothDates.dateTime(iso) : "—"; }  // static/dates.js
  function pct(value) { return value === null || value === undefined ? "—" : value.toFixed(3); }

  function csrfToken() {
    var meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.getAttribute("content") : "";
  }

  function api(method, url, body) {
    var headers = { "Accept": "application/json" };
    var init = { method: method, credentials: "same-origin", headers: headers, cache: "no-store" };
    if (method !== "GET") headers["X-CSRF-Token"] = csrfToken();
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    return fetch(url, init).then(function (response) {
      return response.json().catch(function () { return null; }).then(function (data) {
        if (response.status === 401) window.location.assign("/login");
        if (!response.ok) {
          var error = (data && data.error) || {};
          throw { status: response.status, code: error.code || "http_" + response.status,
                  message: error.message || "The server answered " + response.status, details: error.details || null };
        }
        return data;
      });
    }, function (err) {
      throw { status: 0, code: "network_error", message: "The server cannot be reached (" + err.message + ").", details: null };
    });
  }

  function feedback(node, kind, text) {
    node.className = "feedback " + kind;
    node.setAttribute("data-status", kind);
    node.textContent = text;
    node.hidden = false;
  }

  var COMMANDS = { search: "memory search", rules: "memory rules", solved: "memory solved-search" };

  // Why recall left a card out, in words (tht.memory.recall_explain).
  function reasonText(explained) {
    var d = explained.details || {};
    var rank = function (r) { return r === null || r === undefined ? "none" : String(r); };
    switch (explained.reason) {
      case "returned": return "returned at rank " + d.rank;
      case "ranked_below_cut": return "eligible, but ranked below the first " + d.top +
        " (dense rank " + rank(d.dense_rank) + ", BM25 rank " + rank(d.bm25_rank) + ")";
      case "family": return "this command does not recall its family (" + d.family + ")";
      case "scope": return "the filters ask another scope";
      case "concepts": return "it lacks the concepts the filters ask";
      case "binding": return "none of its dependencies is in the bound database and schema";
      case "filters": return "it is not in the filters' table or column";
      case "decided": return "the session already decided it";
      case "pending": return "its index update is pending (Memory management: Pending index updates)";
      case "not_indexed": return "the index does not hold its current revision";
      case "not_found": return "the card no longer exists";
      default: return explained.reason;
    }
  }

  function cardHref(workspace, id) {
    return "/admin/memory?workspace=" + encodeURIComponent(workspace) + "&card=" + encodeURIComponent(id);
  }

  function cardLink(workspace, card) {
    return h("a", { href: cardHref(workspace, card.id), "data-card": card.id }, card.title || card.id);
  }

  // --- the chart ------------------------------------------------------------------------

  var SERIES = [
    { key: "recall@1", label: "recall@1", color: "#1f5fae", dash: "" },
    { key: "recall@5", label: "recall@5", color: "#1e6b3a", dash: "6 3" },
    { key: "recall@10", label: "recall@10", color: "#7a4f00", dash: "2 3" },
    { key: "mrr", label: "MRR", color: "#6b2d91", dash: "10 3 2 3" }
  ];

  function svg(tag, attrs) {
    var node = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (key) {
      if (key === "text") node.textContent = attrs[key];
      else node.setAttribute(key, attrs[key]);
    });
    for (var i = 2; i < arguments.length; i++) if (arguments[i]) node.appendChild(arguments[i]);
    return node;
  }

  function drawChart(container, runs) {
    clear(container);
    var chrono = runs.slice().reverse();  // oldest first
    var W = 640, H = 240, left = 44, right = 16, top = 12, bottom = 40;
    var plotW = W - left - right, plotH = H - top - bottom;
    var x = function (i) { return chrono.length === 1 ? left + plotW / 2 : left + (plotW * i) / (chrono.length - 1); };
    var y = function (v) { return top + plotH * (1 - v); };
    var last = chrono[chrono.length - 1];
    var chart = svg("svg", {
      viewBox: "0 0 " + W + " " + H, role: "img", class: "chart-svg", "data-testid": "bench-chart-svg",
      "aria-label": "Benchmark history: " + chrono.length + " runs; the latest recall@5 " + pct(last.metrics["recall@5"]) +
        ", MRR " + pct(last.metrics.mrr) + " over " + last.cases + " cases."
    });
    [0, 0.25, 0.5, 0.75, 1].forEach(function (v) {
      chart.appendChild(svg("line", { x1: left, x2: W - right, y1: y(v), y2: y(v), class: "grid" }));
      chart.appendChild(svg("text", { x: left - 6, y: y(v) + 4, "text-anchor": "end", class: "axis", text: v.toFixed(2) }));
    });
    // the card edits made between two runs, midway between their points
    chrono.forEach(function (run, i) {
      var edits = run.edits_before;
      if (i === 0 || !edits || !edits.count) return;
      var mid = (x(i - 1) + x(i)) / 2;
      var mark = svg("g", { class: "edit-mark", "data-testid": "chart-edits", "data-edits": edits.count },
        svg("line", { x1: mid, x2: mid, y1: top, y2: top + plotH, class: "edit-line" }),
        svg("text", { x: mid, y: H - 8, "text-anchor": "middle", class: "edit-label",
                      text: "✎ " + edits.count }),
        svg("title", { text: edits.count + " card edit" + (edits.count === 1 ? "" : "s") + " between these runs" }));
      chart.appendChild(mark);
    });
    SERIES.forEach(function (series) {
      var points = chrono.map(function (run, i) { return x(i) + "," + y(run.metrics[series.key] || 0); });
      if (chrono.length > 1) {
        chart.appendChild(svg("polyline", { points: points.join(" "), fill: "none", stroke: series.color,
          "stroke-width": 2, "stroke-dasharray": series.dash, "data-series": series.key }));
      }
      chrono.forEach(function (run, i) {
        var value = run.metrics[series.key] || 0;
        chart.appendChild(svg("circle", { cx: x(i), cy: y(value), r: 3.5, fill: series.color, "data-series": series.key,
          "data-value": value }, svg("title", { text: series.label + " " + pct(value) + " · " + when(run.started_at) })));
      });
    });
    chrono.forEach(function (run, i) {
      if (run.worse) {
        chart.appendChild(svg("circle", { cx: x(i), cy: y(run.metrics.mrr || 0), r: 9, class: "worse-ring",
          "data-testid": "chart-worse" }, svg("title", { text: "Worse than the run before" })));
      }
      chart.appendChild(svg("text", { x: x(i), y: top + plotH + 16, "text-anchor": "middle", class: "axis",
        text: "#" + (i + 1) }));
    });
    container.appendChild(chart);
    var legend = $("bench-legend");
    clear(legend);
    SERIES.forEach(function (series) {
      var swatch = svg("svg", { width: 28, height: 10, "aria-hidden": "true" },
        svg("line", { x1: 0, x2: 28, y1: 5, y2: 5, stroke: series.color, "stroke-width": 2, "stroke-dasharray": series.dash }));
      legend.appendChild(h("li", null, swatch, " " + series.label));
    });
  }

  // --- the page ---------------------------------------------------------------------------

  function Page() {
    this.ws = null;
    this.tried = null;     // the last try: {question, command, results}
    this.chosen = [];      // [{id, title, family, explain}]
    this.origin = "manual";
    this.runs = [];
    var self = this;
    $("curation-workspace").addEventListener("change", function () { self.choose(this.value); });
    $("run-benchmark").addEventListener("click", function () { self.runBenchmark(); });
    $("run-detail-close").addEventListener("click", function () { $("run-detail").hidden = true; });
    $("try-form").addEventListener("submit", function (event) { event.preventDefault(); self.tryQuestion(); });
    $("find-button").addEventListener("click", function () { self.find(); });
    $("find-input").addEventListener("keydown", function (event) {
      if (event.key === "Enter") { event.preventDefault(); self.find(); }
    });
    $("add-case").addEventListener("click", function () { self.addCase(); });
    $("import-button").addEventListener("click", function () { self.importCases(); });
    $("gaps-refresh").addEventListener("click", function () { self.loadGaps(); });
  }

  Page.prototype.base = function () { return "/api/workspaces/" + encodeURIComponent(this.ws); };

  Page.prototype.choose = function (workspace) {
    this.ws = workspace || null;
    var url = window.location.pathname + (this.ws ? "?workspace=" + encodeURIComponent(this.ws) : "");
    window.history.replaceState(null, "", url);
    $("curation-content").hidden = !this.ws;
    $("curation-placeholder").hidden = !!this.ws;
    $("curation-feedback").hidden = true;
    $("run-detail").hidden = true;
    this.resetTry();
    if (!this.ws) return Promise.resolve();
    var root = $("curation-app");
    root.removeAttribute("data-loaded");
    return Promise.all([this.loadRuns(), this.loadCases(), this.loadGaps()]).then(function () {
      root.setAttribute("data-loaded", "true");
    });
  };

  // --- runs -------------------------------------------------------------------------------

  Page.prototype.loadRuns = function () {
    var self = this;
    return api("GET", this.base() + "/benchmark/runs?limit=50").then(function (data) {
      self.runs = data.runs;
      self.renderRuns(data);
    }, function (err) {
      $("bench-summary").textContent = "The runs could not be read: " + err.message;
    });
  };

  Page.prototype.renderRuns = function (data) {
    var self = this;
    var runs = data.runs;
    var latest = runs[0];
    var since = data.edits_since_last_run;
    var summary = $("bench-summary");
    if (!latest) {
      summary.textContent = "No run yet. Add cases, then run the benchmark: each run is kept and drawn here.";
    } else {
      summary.textContent = "Last run " + when(latest.started_at) + ": " + latest.cases + " cases, recall@5 " +
        pct(latest.metrics["recall@5"]) + ", MRR " + pct(latest.metrics.mrr) + ", " + latest.misses + " missed" +
        (since && since.count ? "; " + since.count + " card edit" + (since.count === 1 ? "" : "s") + " since." : ".");
    }
    var banner = $("worse-banner");
    if (latest && latest.worse) {
      var c = latest.comparison || {};
      banner.textContent = "The last run is worse than the one before on the " + c.cases + " cases both measured" +
        " (MRR " + pct(c.before && c.before.mrr) + " → " + pct(c.after && c.after.mrr) + "; " +
        (c.newly_missed || []).length + " newly missed). Open it to see which.";
      banner.hidden = false;
    } else {
      banner.hidden = true;
    }
    $("bench-chart-figure").hidden = !runs.length;
    if (runs.length) drawChart($("bench-chart"), runs);
    var body = $("run-rows");
    clear(body);
    runs.forEach(function (run) {
      var open = h("button", { type: "button", class: "button small secondary", "data-testid": "run-open" }, "Details",
        h("span", { class: "visually-hidden", text: " of the run of " + when(run.started_at) }));
      open.addEventListener("click", function () { self.openRun(run.run); });
      var edits = run.edits_before;
      body.appendChild(h("tr", { "data-testid": "run-row", "data-run": run.run, "data-worse": run.worse ? "true" : "false" },
        h("td", { "data-label": "Run" }, h("span", { text: when(run.started_at) }),
          run.worse ? h("span", { class: "badge worse", "data-testid": "worse-badge", text: "worse" }) : null,
          run.index && run.index.rebuilding ? h("span", { class: "badge", text: "during a rebuild" }) : null),
        h("td", { "data-label": "Cases", text: String(run.cases) }),
        h("td", { "data-label": "R@1", text: pct(run.metrics["recall@1"]) }),
        h("td", { "data-label": "R@5", "data-testid": "run-r5", text: pct(run.metrics["recall@5"]) }),
        h("td", { "data-label": "R@10", text: pct(run.metrics["recall@10"]) }),
        h("td", { "data-label": "MRR", "data-testid": "run-mrr", text: pct(run.metrics.mrr) }),
        h("td", { "data-label": "Edits before", "data-testid": "run-edits", text: edits ? String(edits.count) : "—",
                  title: edits && edits.latest.length ? edits.latest.map(function (e) {
                    return e.action.replace("card.", "") + " " + (e.title || e.card);
                  }).join("; ") : null }),
        h("td", { "data-label": "Details" }, open)));
    });
    $("run-table").hidden = !runs.length;
  };

  Page.prototype.runBenchmark = function () {
    var self = this;
    var button = $("run-benchmark");
    var note = $("curation-feedback");
    button.disabled = true;
    button.classList.add("is-saving");
    feedback(note, "info", "Running the benchmark…");
    return api("POST", this.base() + "/benchmark/runs").then(function (run) {
      var text = "Run done: " + run.cases + " cases in " + run.seconds + " s, recall@5 " + pct(run.metrics["recall@5"]) +
        ", MRR " + pct(run.metrics.mrr) + ", " + run.misses.length + " missed.";
      if (run.comparison && run.comparison.worse) text += " Worse than the run before.";
      if (run.index.rebuilding) text += " " + run.index.note + ".";
      feedback(note, run.comparison && run.comparison.worse ? "warning" : "saved", text);
      return Promise.all([self.loadRuns(), self.loadCases()]).then(function () { return self.openRun(run.run); });
    }, function (err) {
      feedback(note, "error", "The benchmark did not run: " + err.message);
    }).then(function () {
      button.classList.remove("is-saving");
      button.disabled = !self.caseCount;
    });
  };

  Page.prototype.openRun = function (runId) {
    var self = this;
    return api("GET", this.base() + "/benchmark/runs/" + encodeURIComponent(runId)).then(function (run) {
      self.renderRun(run);
    }, function (err) {
      feedback($("curation-feedback"), "error", "The run could not be read: " + err.message);
    });
  };

  Page.prototype.renderRun = function (run) {
    var ws = this.ws;
    var box = $("run-detail");
    box.setAttribute("data-run", run.run);
    $("run-detail-heading").textContent = "Run of " + when(run.started_at);
    var index = $("run-detail-index");
    index.hidden = !run.index.rebuilding;
    index.textContent = run.index.rebuilding ? "During a rebuild of the index: " + run.index.note + "." : "";
    var figures = $("run-detail-figures");
    clear(figures);
    var rows = [["Cases", String(run.cases) + " in " + run.seconds + " s"],
      ["Overall", "R@1 " + pct(run.metrics["recall@1"]) + " · R@5 " + pct(run.metrics["recall@5"]) + " · R@10 " +
        pct(run.metrics["recall@10"]) + " · MRR " + pct(run.metrics.mrr)]];
    Object.keys(run.by_command).forEach(function (command) {
      var m = run.by_command[command];
      rows.push([COMMANDS[command] || command, m.cases + " cases · R@1 " + pct(m["recall@1"]) + " · R@5 " +
        pct(m["recall@5"]) + " · R@10 " + pct(m["recall@10"]) + " · MRR " + pct(m.mrr)]);
    });
    if (run.comparison && run.comparison.cases) {
      var c = run.comparison;
      rows.push(["Against the run before", c.cases + " cases both measured: MRR " + pct(c.before.mrr) + " → " +
        pct(c.after.mrr) + ", R@5 " + pct(c.before["recall@5"]) + " → " + pct(c.after["recall@5"]) + "; " +
        c.newly_missed.length + " newly missed, " + c.fixed.length + " fixed" + (c.worse ? " (worse)" : "")]);
    }
    rows.push(["Index", "embedder " + run.index.embedder + ", " + (run.index.binding.database || "—") + "." +
      (run.index.binding.schema || "—")]);
    rows.forEach(function (pair) {
      figures.appendChild(h("dt", { text: pair[0] }));
      figures.appendChild(h("dd", { text: pair[1] }));
    });
    var misses = $("run-misses");
    clear(misses);
    run.misses.forEach(function (miss) {
      var items = miss.missing.map(function (card) {
        var why = miss.reasons[card.id];
        return h("li", { "data-testid": "miss-card", "data-card": card.id, "data-reason": why ? why.reason : "" },
          cardLink(ws, card), " — ", h("span", { class: "muted", text: why ? reasonText(why) : "" }));
      });
      var returned = miss.returned.slice(0, 3).map(function (card) { return card.title || card.id; }).join("; ");
      misses.appendChild(h("li", { "data-testid": "miss", "data-case": miss.case },
        h("strong", { text: miss.question }), " ", h("span", { class: "muted small", text: "(" + (COMMANDS[miss.command] || miss.command) + ")" }),
        h("ul", null, items),
        returned ? h("p", { class: "hint", text: "Recall's first answers: " + returned }) : null));
    });
    if (!run.misses.length) misses.appendChild(h("li", { class: "muted", text: "None: every expected card was among the first 10." }));
    var changes = $("run-changes");
    clear(changes);
    run.expected_changes.forEach(function (change) {
      changes.appendChild(h("li", { "data-testid": "expected-change", "data-state": change.state },
        change.state === "deleted" ? h("span", { text: change.id }) : cardLink(ws, change),
        " — " + (change.state === "deleted" ? "deleted since its case was written (counted as a miss)"
          : "changed since its case was written (revision " + change.revision_then + " → " + change.revision_now + ")")));
    });
    if (!run.expected_changes.length) changes.appendChild(h("li", { class: "muted", text: "None." }));
    box.hidden = false;
    $("run-detail-heading").focus();
  };

  // --- cases ------------------------------------------------------------------------------

  Page.prototype.loadCases = function () {
    var self = this;
    return api("GET", this.base() + "/benchmark/cases").then(function (data) {
      self.renderCases(data);
    }, function (err) {
      feedback($("curation-feedback"), "error", "The cases could not be read: " + err.message);
    });
  };

  Page.prototype.renderCases = function (data) {
    var self = this;
    this.caseCount = data.total;
    $("case-count").textContent = "(" + data.total + ")";
    $("run-benchmark").disabled = !data.total;
    $("cases-empty").hidden = data.total > 0;
    var list = $("case-list");
    clear(list);
    data.items.forEach(function (item) {
      var remove = h("button", { type: "button", class: "button small danger", "data-testid": "case-remove" }, "Remove",
        h("span", { class: "visually-hidden", text: " the case “" + item.question + "”" }));
      remove.addEventListener("click", function () { self.removeCase(item); });
      var stale = item.expected.filter(function (e) { return e.state !== "current"; });
      var confirm = null;
      if (stale.length) {
        confirm = h("button", { type: "button", class: "button small secondary", "data-testid": "case-confirm" },
          "Keep the current cards");
        confirm.addEventListener("click", function () { self.confirmCase(item); });
      }
      list.appendChild(h("li", { class: "case", "data-testid": "case", "data-case": item.id },
        h("p", { class: "case-question" }, h("strong", { text: item.question }), " ",
          h("span", { class: "muted small", text: "(" + (COMMANDS[item.command] || item.command) + ", " + item.origin + ")" })),
        h("ul", { class: "case-cards" }, item.expected.map(function (card) {
          var state = card.state === "current" ? null : h("span", { class: "badge " + card.state, "data-testid": "card-state",
            text: card.state === "deleted" ? "deleted" : "changed since (rev. " + card.revision_then + " → " + card.revision_now + ")" });
          return h("li", { "data-card": card.id }, card.state === "deleted" ? h("span", { text: card.id }) : cardLink(self.ws, card),
            state ? " " : null, state);
        })),
        h("div", { class: "actions" }, confirm, remove)));
    });
  };

  Page.prototype.removeCase = function (item) {
    var self = this;
    return api("DELETE", this.base() + "/benchmark/cases/" + encodeURIComponent(item.id)).then(function () {
      feedback($("curation-feedback"), "saved", "Case removed: “" + item.question + "”.");
      return self.loadCases();
    }, function (err) {
      feedback($("curation-feedback"), "error", "The case was not removed: " + err.message);
    });
  };

  Page.prototype.confirmCase = function (item) {
    var self = this;
    var kept = item.expected.filter(function (e) { return e.state !== "deleted"; }).map(function (e) { return e.id; });
    if (!kept.length) return this.removeCase(item);
    return api("POST", this.base() + "/benchmark/cases", {
      question: item.question, command: item.command, filters: item.filters, expected: kept, replace: true
    }).then(function () {
      feedback($("curation-feedback"), "saved", "The case “" + item.question + "” now expects its cards as they are.");
      return self.loadCases();
    }, function (err) {
      feedback($("curation-feedback"), "error", "The case was not changed: " + err.message);
    });
  };

  Page.prototype.importCases = function () {
    var self = this;
    var input = $("import-file");
    var note = $("curation-feedback");
    if (!input.files || !input.files.length) { feedback(note, "warning", "Choose a JSON Lines file first."); return; }
    input.files[0].text().then(function (text) {
      // a case a line, as `tht memory eval --cases` reads them; the server checks each
      var cases = [];
      text.split(/\r?\n/).forEach(function (line, i) {
        if (!line.trim()) return;
        var doc;
        try { doc = JSON.parse(line); } catch (e) {
          throw { message: "line " + (i + 1) + " is not valid JSON (" + e.message + ")" };
        }
        if (doc && typeof doc === "object" && !Array.isArray(doc) && "id" in doc) {
          doc.name = doc.id;
          delete doc.id;
        }
        cases.push(doc);
      });
      if (!cases.length) throw { message: "the file holds no case" };
      return api("POST", self.base() + "/benchmark/cases/import", { cases: cases });
    }).then(function (result) {
      feedback(note, "saved", "Imported: " + result.created + " new cases, " + result.updated + " updated, " +
        result.unchanged + " already there.");
      input.value = "";
      return self.loadCases();
    }, function (err) {
      feedback(note, "error", "Nothing was imported: " + err.message);
    });
  };

  // --- trying a question ------------------------------------------------------------------

  Page.prototype.resetTry = function () {
    this.tried = null;
    this.chosen = [];
    this.origin = "manual";
    clear($("try-results"));
    clear($("find-results"));
    $("try-results-heading").hidden = true;
    $("try-find").hidden = true;
    $("try-feedback").hidden = true;
    this.renderChosen();
  };

  Page.prototype.tryQuestion = function (origin) {
    var self = this;
    var question = $("try-question").value.trim();
    var command = $("try-command").value;
    if (!question) { feedback($("try-feedback"), "warning", "Write the question first."); $("try-question").focus(); return Promise.resolve(); }
    var keep = this.tried && this.tried.question === question && this.tried.command === command ? this.chosen : [];
    this.origin = origin || (keep.length ? this.origin : "manual");
    $("try-feedback").hidden = true;
    return api("POST", this.base() + "/benchmark/try", {
      question: question, command: command, explain: keep.map(function (c) { return c.id; })
    }).then(function (answer) {
      self.tried = { question: question, command: command, results: answer.results };
      self.chosen = keep;
      self.applyExplain(answer.explain);
      self.renderTry();
    }, function (err) {
      feedback($("try-feedback"), "error", "Recall failed: " + err.message);
    });
  };

  Page.prototype.applyExplain = function (explained) {
    var byId = {};
    (explained || []).forEach(function (e) { byId[e.card] = e; });
    this.chosen.forEach(function (card) { if (byId[card.id]) card.explain = byId[card.id]; });
  };

  Page.prototype.renderTry = function () {
    var self = this;
    var list = $("try-results");
    clear(list);
    $("try-results-heading").hidden = false;
    $("try-find").hidden = false;
    if (!this.tried.results.length) {
      list.appendChild(h("li", { class: "muted", text: "No card: recall found nothing for this question." }));
    }
    this.tried.results.forEach(function (card, i) {
      var id = "try-pick-" + i;
      var box = h("input", { type: "checkbox", id: id, "data-testid": "try-pick", "data-card": card.id });
      box.checked = self.chosen.some(function (c) { return c.id === card.id; });
      box.addEventListener("change", function () {
        if (box.checked) self.chooseCard({ id: card.id, title: card.title, family: card.family,
          explain: { reason: "returned", details: { rank: i + 1 } } });
        else self.unchoose(card.id);
      });
      list.appendChild(h("li", { "data-testid": "try-result", "data-card": card.id },
        box, " ", h("label", { for: id, text: card.title }), " ",
        h("span", { class: "muted small", text: card.family.replace(/_/g, " ") })));
    });
    this.renderChosen();
  };

  Page.prototype.chooseCard = function (card) {
    if (!this.chosen.some(function (c) { return c.id === card.id; })) this.chosen.push(card);
    this.renderChosen();
  };

  Page.prototype.unchoose = function (id) {
    this.chosen = this.chosen.filter(function (c) { return c.id !== id; });
    document.querySelectorAll('[data-testid="try-pick"]').forEach(function (box) {
      if (box.getAttribute("data-card") === id) box.checked = false;
    });
    this.renderChosen();
  };

  Page.prototype.renderChosen = function () {
    var self = this;
    var list = $("chosen-list");
    clear(list);
    this.chosen.forEach(function (card) {
      var remove = h("button", { type: "button", class: "button small secondary" }, "Remove",
        h("span", { class: "visually-hidden", text: " " + card.title }));
      remove.addEventListener("click", function () { self.unchoose(card.id); });
      var missed = card.explain && card.explain.reason !== "returned";
      list.appendChild(h("li", { "data-testid": "chosen-card", "data-card": card.id, "data-reason": card.explain ? card.explain.reason : "" },
        cardLink(self.ws, card), " ",
        card.explain ? h("span", { class: missed ? "badge miss" : "badge hit", "data-testid": "chosen-reason",
          text: missed ? "missed: " + reasonText(card.explain) : reasonText(card.explain) }) : null, " ", remove));
    });
    $("chosen-box").hidden = !this.tried;
    $("add-case").disabled = !this.chosen.length;
  };

  Page.prototype.find = function () {
    var self = this;
    var text = $("find-input").value.trim();
    var out = $("find-results");
    clear(out);
    if (!text) return Promise.resolve();
    return api("GET", this.base() + "/memory?page_size=10&q=" + encodeURIComponent(text)).then(function (page) {
      if (!page.items.length) out.appendChild(h("li", { class: "muted", text: "No card matches." }));
      page.items.forEach(function (card) {
        var pick = h("button", { type: "button", class: "button small", "data-testid": "find-pick" }, "It should find this",
          h("span", { class: "visually-hidden", text: ": " + card.title }));
        pick.addEventListener("click", function () { self.pick(card); });
        out.appendChild(h("li", { "data-card": card.id },
          h("div", null, h("strong", { text: card.title }), " ", h("span", { class: "muted small", text: card.family.replace(/_/g, " ") })),
          pick));
      });
    }, function (err) {
      out.appendChild(h("li", { class: "error-text", text: err.message }));
    });
  };

  // A card picked outside recall's answer: why recall did not return it (a miss).
  Page.prototype.pick = function (card) {
    var self = this;
    var returned = this.tried.results.map(function (r) { return r.id; }).indexOf(card.id);
    if (returned >= 0) {
      this.chooseCard({ id: card.id, title: card.title, family: card.family,
        explain: { reason: "returned", details: { rank: returned + 1 } } });
      this.renderTry();
      return Promise.resolve();
    }
    return api("POST", this.base() + "/benchmark/try", {
      question: this.tried.question, command: this.tried.command, explain: [card.id]
    }).then(function (answer) {
      self.chooseCard({ id: card.id, title: card.title, family: card.family, explain: answer.explain[0] });
    }, function (err) {
      feedback($("try-feedback"), "error", err.message);
    });
  };

  Page.prototype.addCase = function () {
    var self = this;
    var button = $("add-case");
    button.disabled = true;
    var missed = this.chosen.some(function (c) { return c.explain && c.explain.reason !== "returned"; });
    var origin = this.origin === "gap" ? "gap" : missed ? "miss" : "manual";
    return api("POST", this.base() + "/benchmark/cases", {
      question: this.tried.question, command: this.tried.command,
      expected: this.chosen.map(function (c) { return c.id; }), origin: origin
    }).then(function (result) {
      var what = result.created ? "Case added" : result.updated ? "Cards added to the case" : "The case already expects these cards";
      feedback($("try-feedback"), "saved", what + ": “" + self.tried.question + "”.");
      $("try-question").value = "";
      self.resetTry();
      $("try-feedback").hidden = false;
      $("try-question").focus();
      return self.loadCases();
    }, function (err) {
      feedback($("try-feedback"), "error", "The case was not added: " + err.message);
      button.disabled = false;
    });
  };

  // --- gaps -------------------------------------------------------------------------------

  Page.prototype.loadGaps = function () {
    var self = this;
    return api("GET", this.base() + "/gaps?days=30&limit=50").then(function (data) {
      self.renderGaps(data);
    }, function (err) {
      $("gaps-log").textContent = "The gaps could not be read: " + err.message;
    });
  };

  function draftHref(workspace, draft) {
    var params = new URLSearchParams({ workspace: workspace, draft: "1", draft_family: draft.family,
      draft_title: draft.title });
    if (draft.content) params.set("draft_content", draft.content);
    if (draft.question) params.set("draft_question", draft.question);
    return "/admin/memory?" + params.toString();
  }

  var REASONS = { no_result: "no result", low_coverage: "first card covers little of the question", proposed: "a new card was proposed after it" };

  Page.prototype.renderGaps = function (data) {
    var self = this;
    var log = data.log;
    $("gaps-rule").textContent = "A recall is weak when it found nothing, when its first card holds less than " +
      Math.round(data.rule.weak_below * 100) + " % of the question's terms (weighted by rarity), or when the agent then proposed a new card." +
      " Similar questions (half their terms in common) are grouped; groups are ranked by how often they were asked, recent asks counting more.";
    $("gaps-log").textContent = log.enabled
      ? "Recall log: " + data.window.recalls + " recalls in the last " + data.window.days + " days, " + data.window.weak +
        " weak; " + log.entries + " kept of at most " + log.max_entries + " (" + log.retention_days + " days)" +
        (log.dropped ? ", " + log.dropped + " oldest dropped to keep the bound" : "") +
        (log.expired ? ", " + log.expired + " expired" : "") + (log.lost ? ", " + log.lost + " not logged" : "") + "."
      : "The recall log is off in this installation (recall_log.enabled: false): no gap is mined.";
    var list = $("gap-list");
    clear(list);
    $("gaps-empty").hidden = data.gaps.length > 0 || !log.enabled;
    data.gaps.forEach(function (gap) {
      var write = h("a", { class: "button small primary", href: draftHref(self.ws, gap.draft), "data-testid": "gap-write" }, "Write a card",
        h("span", { class: "visually-hidden", text: " for “" + gap.examples[0].question + "”" }));
      var bench = h("button", { type: "button", class: "button small secondary", "data-testid": "gap-benchmark" }, "Add to benchmark",
        h("span", { class: "visually-hidden", text: ": “" + gap.examples[0].question + "”" }));
      bench.addEventListener("click", function () {
        $("try-question").value = gap.examples[0].question;
        $("try-command").value = gap.command;
        self.tryQuestion("gap").then(function () { $("try-heading").scrollIntoView(); $("find-input").focus(); });
      });
      var reasons = Object.keys(gap.reasons).map(function (r) { return gap.reasons[r] + " × " + (REASONS[r] || r); }).join(", ");
      list.appendChild(h("li", { class: "gap", "data-testid": "gap", "data-gap": gap.id },
        h("div", { class: "gap-head" },
          h("strong", { text: gap.examples[0].question }),
          h("span", { class: "muted small", text: " " + gap.asks + " ask" + (gap.asks === 1 ? "" : "s") + " · " +
            (COMMANDS[gap.command] || gap.command) + " · last " + when(gap.last_asked) })),
        gap.examples.length > 1 ? h("ul", { class: "gap-examples" }, gap.examples.slice(1).map(function (e) {
          return h("li", { text: e.question + (e.asks > 1 ? " (" + e.asks + "×)" : "") });
        })) : null,
        h("p", { class: "hint", text: "Why weak: " + reasons + (gap.first_result ? ". Recall's first answer: " +
          (gap.first_result.title || gap.first_result.id) : "") + ". Asked by " + gap.principals.join(", ") + "." }),
        h("div", { class: "actions" }, write, bench)));
    });
  };

  // --- boot -------------------------------------------------------------------------------

  function boot() {
    var root = $("curation-app");
    if (!root) return;
    var page = new Page();
    var select = $("curation-workspace");
    var wanted = new URLSearchParams(window.location.search).get("workspace") || select.value;
    var options = Array.prototype.map.call(select.options, function (o) { return o.value; }).filter(Boolean);
    if (!wanted && options.length === 1) wanted = options[0];
    if (options.indexOf(wanted) >= 0) {
      select.value = wanted;
      page.choose(wanted);
    }
    root.setAttribute("data-ready", "true");
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", boot);
  else boot();
})();
