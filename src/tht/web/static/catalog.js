/* The Catalog page: each administered workspace's DWH binding and sync runs, "Sync
 * now", and the run drawer (removals, deleted Memory cards, errors, retry).
 *
 * Plain JavaScript, no build step. Data reaches the page through textContent only.
 * Unsafe requests carry the session's CSRF token, like app.js.
 */
(function () {
  "use strict";

  function csrfToken() {
    var meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.getAttribute("content") : "";
  }

  function api(method, url) {
    var headers = { "Accept": "application/json" };
    if (method !== "GET") headers["X-CSRF-Token"] = csrfToken();
    return fetch(url, { method: method, credentials: "same-origin", headers: headers, cache: "no-store" })
      .then(function (response) {
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

  var h = window.ThothDom.h;  // static/dom.js
  var clear = window.ThothDom.clear;

  function when(iso) { return iso ? window.ThothDates.dateTime(iso) : ""; }  // static/dates.js

  function base(workspace) { return "/api/workspaces/" + encodeURIComponent(workspace) + "/catalog"; }

  function removedText(run) {
    var parts = run.removed.tables.map(function (t) { return "table " + t; })
      .concat(run.removed.columns.map(function (c) { return "column " + c.table + "." + c.column; }));
    if (run.kind === "forget" && run.forgotten) {
      var f = run.forgotten;
      return "forgotten in the Catalog only: " + (f.all ? "the whole snapshot" : f.column ? f.table + "." + f.column : f.table);
    }
    return parts.length ? parts.join(", ") : "nothing";
  }

  var STATUS = { completed: "Completed", pending: "Cleanup pending", failed: "Failed" };

  function feedback(node, kind, text) {
    node.className = "feedback " + kind;
    node.textContent = text;
    node.hidden = false;
  }

  // --- one workspace ------------------------------------------------------------------

  function Workspace(article, drawer) {
    this.article = article;
    this.drawer = drawer;
    this.id = article.getAttribute("data-catalog-workspace");
    this.syncButton = article.querySelector('[data-action="sync"]');
    var self = this;
    this.syncButton.addEventListener("click", function () { self.sync(); });
  }

  Workspace.prototype.load = function () {
    var self = this;
    return api("GET", base(this.id)).then(function (data) { self.render(data); }, function (err) {
      var binding = self.article.querySelector('[data-role="binding"]');
      clear(binding);
      binding.appendChild(h("dt", { text: "Binding" }));
      binding.appendChild(h("dd", { class: "error-text", text: err.message }));
    });
  };

  Workspace.prototype.render = function (data) {
    var self = this;
    var binding = this.article.querySelector('[data-role="binding"]');
    clear(binding);
    if (data.binding) {
      [["Database", data.binding.database], ["Schema", data.binding.schema],
       ["Connection", data.binding.connection || "none: recall only (a sync needs `tht catalog bind --connection NAME`)"],
       ["Last snapshot", data.snapshot ? when(data.snapshot.taken_at) + " · " + data.snapshot.tables +
         " tables, " + data.snapshot.columns + " columns" : "none"]].forEach(function (pair) {
        binding.appendChild(h("dt", { text: pair[0] }));
        binding.appendChild(h("dd", { "data-testid": "binding-" + pair[0].toLowerCase().replace(/ /g, "-"), text: pair[1] }));
      });
    } else {
      binding.appendChild(h("dt", { text: "Binding" }));
      binding.appendChild(h("dd", { class: "muted", "data-testid": "no-binding" }, "No DWH binding yet: an admin runs ",
        h("code", { text: "tht catalog bind -c runtime.yaml --connection NAME" }), " (the runtime file's database and schema, one of the installation's DWH connections)."));
    }
    this.syncButton.disabled = !(data.binding && data.binding.connection);
    var pending = this.article.querySelector('[data-role="pending"]');
    if (data.pending_run) {
      pending.textContent = "The Memory cleanup of run " + data.pending_run.run_id +
        " is pending: new syncs wait until it completes (open the run to retry).";
      pending.hidden = false;
    } else {
      pending.hidden = true;
    }
    var body = this.article.querySelector('[data-role="runs"]');
    clear(body);
    data.runs.forEach(function (run) {
      var open = h("button", { type: "button", class: "button small secondary", "data-testid": "run-open",
                               "aria-controls": "run-drawer" }, "Details",
                   h("span", { class: "visually-hidden", text: " of run " + run.run_id }));
      open.addEventListener("click", function () { self.drawer.open(self, run.run_id); });
      body.appendChild(h("tr", { "data-testid": "run-row", "data-run": run.run_id, "data-status": run.status },
        h("td", { "data-label": "Started", text: when(run.started_at) }),
        h("td", { "data-label": "Kind", text: run.kind }),
        h("td", { "data-label": "Status" }, h("span", { class: "run-status " + run.status, text: STATUS[run.status] || run.status })),
        h("td", { "data-label": "Removed", text: removedText(run) }),
        h("td", { "data-label": "Deleted cards", text: String(run.deleted_cards.length) }),
        h("td", { "data-label": "Errors", text: String(run.errors.length) }),
        h("td", { "data-label": "Details" }, open)));
    });
    this.article.querySelector('[data-role="no-runs"]').hidden = data.runs.length > 0;
  };

  Workspace.prototype.sync = function () {
    var self = this;
    var note = document.getElementById("catalog-feedback");
    this.syncButton.disabled = true;
    feedback(note, "info", "Syncing " + this.id + "…");
    return api("POST", base(this.id) + "/sync").then(function (run) {
      feedback(note, "saved", "Sync of " + self.id + " completed: removed " + removedText(run) + "; " +
        run.deleted_cards.length + " Memory cards deleted.");
      return self.load().then(function () { self.drawer.open(self, run.run_id); });
    }, function (err) {
      feedback(note, "error", "Sync of " + self.id + " failed: " + err.message);
      var runId = err.details && err.details.run_id;
      return self.load().then(function () { if (runId) self.drawer.open(self, runId); });
    }).then(function () { self.syncButton.disabled = false; });
  };

  // --- the run drawer -----------------------------------------------------------------

  function Drawer(node) {
    this.node = node;
    this.workspace = null;
    this.runId = null;
    this.opener = null;
    var self = this;
    document.getElementById("run-drawer-close").addEventListener("click", function () { self.close(); });
    document.getElementById("run-retry").addEventListener("click", function () { self.retry(); });
    document.addEventListener("keydown", function (event) {
      if (event.key === "Escape" && !self.node.hidden) self.close();
    });
  }

  Drawer.prototype.open = function (workspace, runId) {
    var self = this;
    this.workspace = workspace;
    this.runId = runId;
    this.opener = document.activeElement;
    document.getElementById("run-feedback").hidden = true;
    return api("GET", base(workspace.id) + "/runs/" + encodeURIComponent(runId)).then(function (run) {
      self.render(run);
      self.node.hidden = false;
      document.getElementById("run-drawer-title").focus();
    }, function (err) {
      self.node.hidden = false;
      feedback(document.getElementById("run-feedback"), "error", err.message);
    });
  };

  Drawer.prototype.close = function () {
    this.node.hidden = true;
    if (this.opener && this.opener.focus && document.body.contains(this.opener)) this.opener.focus();
  };

  Drawer.prototype.render = function (run) {
    this.node.setAttribute("data-run", run.run_id);
    this.node.setAttribute("data-status", run.status);
    var summary = document.getElementById("run-summary");
    clear(summary);
    [["Run", run.run_id], ["Workspace", run.workspace], ["Scope", run.database + "." + run.schema],
     ["Kind", run.kind], ["Status", STATUS[run.status] || run.status], ["Phase", run.phase],
     ["Started", when(run.started_at)], ["Finished", run.finished_at ? when(run.finished_at) : "not yet"],
     ["Cleanup attempts", String(run.attempts)], ["Links removed", String(run.links_removed)]
    ].forEach(function (pair) {
      summary.appendChild(h("dt", { text: pair[0] }));
      summary.appendChild(h("dd", { "data-testid": "run-" + pair[0].toLowerCase().replace(/ /g, "-"), text: pair[1] }));
    });
    var removed = document.getElementById("run-removed");
    clear(removed);
    run.removed.tables.forEach(function (t) { removed.appendChild(h("li", { text: "Table " + t })); });
    run.removed.columns.forEach(function (c) { removed.appendChild(h("li", { text: "Column " + c.table + "." + c.column })); });
    if (!removed.firstChild) removed.appendChild(h("li", { class: "muted", text: removedText(run) }));
    var deleted = document.getElementById("run-deleted");
    clear(deleted);
    run.deleted_cards.forEach(function (card) {
      deleted.appendChild(h("li", { "data-testid": "deleted-card", "data-card": card.id },
        card.title + " ", h("span", { class: "muted small", text: "(" + card.family + ", " + card.id + ")" })));
    });
    if (!run.deleted_cards.length) deleted.appendChild(h("li", { class: "muted", text: "None" }));
    var errors = document.getElementById("run-errors");
    clear(errors);
    run.errors.forEach(function (e) {
      errors.appendChild(h("li", { "data-testid": "run-error", class: "error-text" },
        (e.at ? when(e.at) + " · " : "") + e.phase + " · " + e.code + ": " + e.message));
    });
    if (!run.errors.length) errors.appendChild(h("li", { class: "muted", text: "None" }));
    document.getElementById("run-retry").hidden = run.status !== "pending";
  };

  Drawer.prototype.retry = function () {
    var self = this;
    var button = document.getElementById("run-retry");
    var note = document.getElementById("run-feedback");
    button.disabled = true;
    feedback(note, "info", "Retrying the Memory cleanup…");
    return api("POST", base(this.workspace.id) + "/runs/" + encodeURIComponent(this.runId) + "/retry").then(function (run) {
      self.render(run);
      feedback(note, "saved", "Cleanup completed: " + run.deleted_cards.length + " Memory cards deleted.");
      document.getElementById("catalog-feedback").hidden = true;  // the page's failure note is resolved
    }, function (err) {
      feedback(note, "error", "Retry failed: " + err.message);
      return api("GET", base(self.workspace.id) + "/runs/" + encodeURIComponent(self.runId))
        .then(function (run) { self.render(run); }, function () {});
    }).then(function () {
      button.disabled = false;
      return self.workspace.load();
    });
  };

  // --- boot ---------------------------------------------------------------------------

  function boot() {
    var section = document.querySelector("[data-catalog]");
    if (!section) return;
    var drawer = new Drawer(document.getElementById("run-drawer"));
    var loads = Array.prototype.map.call(section.querySelectorAll("[data-catalog-workspace]"), function (article) {
      return new Workspace(article, drawer).load();
    });
    Promise.all(loads).then(function () { section.setAttribute("data-ready", "true"); });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", boot);
  else boot();
})();
