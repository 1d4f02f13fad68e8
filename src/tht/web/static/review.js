/* The reviewer's page (gate reviewer_memory_promote): a session's editable Memory
 * summary; choose, edit, decline all, apply; the result and pending indexing.
 *
 * Plain JavaScript, no build step. Data reaches the page through textContent only.
 * Writes carry the session's CSRF token (meta csrf-token), like the administration.
 */
(function () {
  "use strict";

  // Each family's text fields in order: the server's model, in the page as JSON
  // (base.html). A solved question's SQL shows read-only, apart; an explained error's
  // signature follows its texts. A field without a label here shows its name.
  var CARD_FIELDS = JSON.parse(document.getElementById("card-fields").textContent);
  var WORDS = {
    domain_clarification: { content: "Clarification" },
    sql_rule: { content: "Rule", sql: "SQL example" },
    solved_question: { content: "Notes" },
    explained_error: { context: "Error observed", content: "Correction", sql: "Corrected SQL" }
  };
  var FIELDS = {};
  CARD_FIELDS.families.forEach(function (entry) {
    var family = entry[0];
    var words = WORDS[family] || {};
    var names = entry[1].map(function (field) { return field[0]; }).filter(function (name) {
      return !(family === "solved_question" && name === "sql");
    });
    if (family === "explained_error") names.push("error_signature");
    FIELDS[family] = names.map(function (name) {
      return [name, words[name] || (name === "error_signature" ? "Error signature"
        : name.charAt(0).toUpperCase() + name.slice(1))];
    });
  });
  var LABELS = { domain_clarification: "Domain clarification", sql_rule: "SQL rule",
    solved_question: "Solved question", explained_error: "Explained error" };

  function $(id) { return document.getElementById(id); }

  function h(tag, attrs) {
    var el = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (key) {
      var value = attrs[key];
      if (value === null || value === undefined || value === false) return;
      if (key === "text") el.textContent = value;
      else if (key === "class") el.className = value;
      else if (key.slice(0, 2) === "on" && typeof value === "function") el.addEventListener(key.slice(2), value);
      else if (key === "value") el.value = value;
      else if (key === "checked") el.checked = !!value;
      else el.setAttribute(key, value === true ? "" : String(value));
    });
    for (var i = 2; i < arguments.length; i++) {
      var child = arguments[i];
      if (child === null || child === undefined || child === false) continue;
      (Array.isArray(child) ? child : [child]).forEach(function (c) {
        el.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
      });
    }
    return el;
  }

  function clear(el) { while (el.firstChild) el.removeChild(el.firstChild); }

  function api(method, url, body) {
    var meta = document.querySelector('meta[name="csrf-token"]');
    var headers = { "Accept": "application/json" };
    if (method !== "GET") headers["X-CSRF-Token"] = meta ? meta.getAttribute("content") : "";
    var init = { method: method, credentials: "same-origin", headers: headers, cache: "no-store" };
    if (body !== undefined) { headers["Content-Type"] = "application/json"; init.body = JSON.stringify(body); }
    return fetch(url, init).then(function (response) {
      return response.json().catch(function () { return null; }).then(function (data) {
        if (response.status === 401) window.location.assign("/login");
        if (!response.ok) {
          var error = (data && data.error) || {};
          var err = new Error(error.message || ("The server answered " + response.status));
          err.code = error.code || "http_" + response.status;
          throw err;
        }
        return data;
      });
    }, function (err) { throw new Error("The server cannot be reached (" + err.message + ")."); });
  }

  var state = { workspace: "", session: "", summary: null };
  var feedback = $("review-feedback");

  function say(kind, text) {
    clear(feedback);
    if (text) feedback.appendChild(h("p", { class: kind === "error" ? "alert error" : kind === "saving" ? "note saving" : "note", text: text,
      "data-testid": "review-message", "data-kind": kind }));
  }

  function base() { return "/api/workspaces/" + encodeURIComponent(state.workspace) + "/review/sessions"; }

  // --- sessions -------------------------------------------------------------------------

  function placeholders() {
    $("sessions-placeholder").hidden = !!state.workspace;
    var summary = $("summary-placeholder");
    summary.hidden = !!state.session;
    summary.textContent = (state.workspace ? "Choose one of its sessions" : "Choose a workspace, then one of its sessions") +
      ": its proposals appear here, to select, edit and apply.";
  }

  /* The URL names the workspace and the session, so a reload or a shared link reopens them. */
  function writeUrl() {
    var params = new URLSearchParams();
    if (state.workspace) params.set("workspace", state.workspace);
    if (state.workspace && state.session) params.set("session", state.session);
    var search = params.toString();
    window.history.replaceState(null, "", window.location.pathname + (search ? "?" + search : ""));
  }

  function loadSessions(keep) {
    var list = $("session-list");
    if (!keep) {
      $("summary").hidden = true;
      $("result").hidden = true;
      state.session = "";
      clear(list);
      $("sessions-empty").hidden = true;
    }
    placeholders();
    writeUrl();
    if (!state.workspace) return Promise.resolve();
    return api("GET", base()).then(function (data) {
      clear(list);
      $("sessions-empty").hidden = data.items.length > 0;
      data.items.forEach(function (item) {
        var status = item.reviewed ? " — reviewed (" + item.reviewed + ")" : " — to review";
        list.appendChild(h("li", null, h("button", {
          type: "button", class: "button secondary", "data-testid": "session-item", "data-session": item.session,
          onclick: function () { openSession(item.session); }
        }, item.session, h("span", { class: "muted small", text: " " + item.proposals + " proposals" + status }))));
      });
      markCurrent();
    }).catch(function (err) { say("error", err.message); });
  }

  function markCurrent() {
    Array.prototype.forEach.call(document.querySelectorAll("[data-testid=session-item]"), function (b) {
      b.setAttribute("aria-current", b.getAttribute("data-session") === state.session ? "true" : "false");
    });
  }

  function openSession(session, keepMessage) {
    state.session = session;
    markCurrent();
    placeholders();
    writeUrl();
    if (!keepMessage) {
      say("", "");
      $("result").hidden = true;
    }
    return api("GET", base() + "/" + encodeURIComponent(session)).then(function (summary) {
      state.summary = summary;
      renderSummary(summary);
      if (summary.reviewed && !keepMessage) return showReceipt(summary.reviewed);
    }).catch(function (err) { say("error", err.message); });
  }

  // --- the summary ------------------------------------------------------------------------

  function fieldInput(proposal, name, label, value, readOnly) {
    var id = "f-" + proposal + "-" + name;
    var multiline = name !== "scope";
    var input = multiline
      ? h("textarea", { id: id, name: name, class: name === "sql" ? "sql" : null, "data-field": name,
          "data-testid": "field-" + proposal + "-" + name, readonly: readOnly || null })
      : h("input", { id: id, type: "text", name: name, "data-field": name,
          "data-testid": "field-" + proposal + "-" + name });
    input.value = value || "";
    return [h("label", { class: "field", for: id, text: label }), input];
  }

  function depsText(deps) {
    return (deps || []).map(function (d) {
      return [d.database, d.schema, d.table, d.column].filter(function (p) { return p; }).join(".");
    }).join("\n");
  }

  function linkLabel(link) {
    if (link.proposal) return "proposal " + link.proposal;
    var known = (state.summary.links || []).filter(function (l) { return l.target === link.target; })[0];
    return (known && known.target_title ? known.target_title + " " : "") + "(" + link.target + ")";
  }

  function itemEditor(entry, options) {
    var proposal = entry.proposal;
    var card = entry.card;
    var box = h("input", { type: "checkbox", id: "select-" + proposal, "data-testid": "select-" + proposal,
      checked: !options.stale, disabled: options.stale || options.reviewed || null });
    var body = h("div", { class: "item-body" });
    body.appendChild(h("label", { class: "field", for: "f-" + proposal + "-title", text: "Title" }));
    var title = h("input", { id: "f-" + proposal + "-title", type: "text", "data-field": "title",
      "data-testid": "field-" + proposal + "-title" });
    title.value = card.title || "";
    body.appendChild(title);
    (FIELDS[entry.family] || []).forEach(function (f) {
      if (f[0] === "error_signature" && !card.error_signature) return;
      body.appendChild(h("div", null, fieldInput(proposal, f[0], f[1], card[f[0]])));
    });
    if (entry.family === "solved_question") {
      body.appendChild(h("label", { class: "field", text: "Approved SQL (read-only: return to SQL review to change it)" }));
      body.appendChild(h("pre", { class: "sql", "data-testid": "approved-sql", text: card.sql }));
    }
    body.appendChild(h("div", null, fieldInput(proposal, "concepts", "Concepts (comma separated)",
      (card.concepts || []).join(", "))));
    body.appendChild(h("div", null, fieldInput(proposal, "dependencies",
      "Dependencies (one a line: database.schema.table.column)", depsText(card.dependencies))));
    if (entry.links && entry.links.length) {
      var links = h("ul", { class: "links" });
      entry.links.forEach(function (link, i) {
        var id = "link-" + proposal + "-" + i;
        links.appendChild(h("li", null, h("input", { type: "checkbox", id: id, checked: true, "data-link": String(i),
          "data-testid": id }), h("label", { for: id, text: " " + link.meaning + " → " + linkLabel(link) })));
      });
      body.appendChild(h("p", { class: "field", text: "Links (uncheck to drop)" }));
      body.appendChild(links);
    }
    return h("div", { class: "review-item" + (options.stale ? " stale" : ""), "data-testid": "review-item",
      "data-proposal": proposal, "data-family": entry.family },
      h("div", { class: "item-head" }, box, h("label", { for: "select-" + proposal },
        h("strong", { text: card.title }), h("span", { class: "muted small",
          text: " " + LABELS[entry.family] + " · proposal " + proposal + " · from " + entry.sources.join(", ") }))),
      options.extra || null, body);
  }

  /* A list-valued field (dependencies, concepts) as a list: what only one side has is
   * marked removed (current) or added (proposed), the rest is shown as it is. */
  function itemText(value) {
    if (value && typeof value === "object") {
      return [value.database, value.schema, value.table, value.column].filter(function (p) { return p; }).join(".");
    }
    return String(value);
  }

  function listDiff(mine, theirs, mark, kind) {
    var others = (theirs || []).map(itemText);
    var items = (mine || []).map(itemText);
    if (!items.length) return h("span", { class: "muted", text: "none" });
    return h("ul", { class: "diff-list" }, items.map(function (text) {
      var changed = others.indexOf(text) < 0;
      return h("li", { "data-change": changed ? kind : "same" },
        changed ? h(mark, { text: text }) : text);
    }));
  }

  function changeCell(change, side) {
    var mine = side === "before" ? change.before : change.after;
    var theirs = side === "before" ? change.after : change.before;
    var mark = side === "before" ? "del" : "ins";
    if (Array.isArray(mine) || Array.isArray(theirs)) {
      return listDiff(mine, theirs, mark, side === "before" ? "removed" : "added");
    }
    return mine === null || mine === undefined || mine === "" ? h("span", { class: "muted", text: "—" })
      : h(mark, { text: String(mine) });
  }

  var FIELD_LABELS = { content: "Content", scope: "Scope", rationale: "Rationale", context: "Context", sql: "SQL",
    question: "Question", title: "Title", concepts: "Concepts", dependencies: "Dependencies",
    error_signature: "Error signature" };

  function changesTable(update) {
    if (!update.changes.length) return h("p", { class: "muted", text: "No change to the content." });
    var rows = update.changes.map(function (c) {
      return h("tr", { "data-testid": "change-row", "data-change-field": c.field },
        h("th", { scope: "row", text: FIELD_LABELS[c.field] || c.field }),
        h("td", { "data-label": "Current" }, changeCell(c, "before")),
        h("td", { "data-label": "Proposed" }, changeCell(c, "after")));
    });
    return h("div", { class: "changes-wrap" }, h("table", { class: "changes", "data-testid": "changes" },
      h("thead", null, h("tr", null, h("th", { scope: "col", text: "Field" }),
        h("th", { scope: "col", text: "Current" }), h("th", { scope: "col", text: "Proposed" }))), h("tbody", null, rows)));
  }

  function renderSummary(summary) {
    var reviewed = !!summary.reviewed;
    $("summary").hidden = false;
    ["additions", "updates", "solved", "reused"].forEach(function (id) { clear($(id)); });
    if (!summary.additions.length) $("additions").appendChild(h("p", { class: "muted", text: "None." }));
    summary.additions.forEach(function (entry) {
      $("additions").appendChild(itemEditor(entry, { reviewed: reviewed }));
    });
    if (!summary.updates.length) $("updates").appendChild(h("p", { class: "muted", text: "None." }));
    summary.updates.forEach(function (entry) {
      var extra = h("div", null,
        h("p", { class: "small", text: "Replaces the current content of " + entry.card_id + " (revision " +
          entry.revision + "): " + (entry.change || "") }),
        entry.stale ? h("p", { class: "alert error", "data-testid": "stale-update",
          text: "The card changed (or was deleted) since it was proposed: it cannot be saved from this summary." })
          : null,
        changesTable(entry));
      $("updates").appendChild(itemEditor(entry, { stale: entry.stale, reviewed: reviewed, extra: extra }));
    });
    if (summary.solved_question) {
      $("solved").appendChild(itemEditor(summary.solved_question, { reviewed: reviewed }));
    } else {
      $("solved").appendChild(h("p", { class: "muted", text: "None." }));
    }
    if (!summary.reused.length) $("reused").appendChild(h("li", { class: "muted", text: "None." }));
    summary.reused.forEach(function (r) {
      $("reused").appendChild(h("li", { "data-testid": "reused-item", text: (r.title || r.card_id) + " (" + r.card_id +
        ", proposal " + r.proposal + ")" }));
    });
    var banner = $("reviewed-banner");
    banner.hidden = !reviewed;
    $("summary-items").hidden = reviewed;  // a review is applied once: its receipt is the result
    $("apply-review").disabled = reviewed;
    $("decline-all").disabled = reviewed;
    if (reviewed) {
      banner.textContent = "This session was reviewed (" + summary.reviewed.outcome + ") by " +
        summary.reviewed.reviewer + " at " + window.ThothDates.dateTime(summary.reviewed.created_at) +
        ". A review is applied once.";
    }
  }

  // --- the choice -------------------------------------------------------------------------

  function editedCard(item, entry) {
    var card = JSON.parse(JSON.stringify(entry.card));
    Array.prototype.forEach.call(item.querySelectorAll("[data-field]"), function (input) {
      var name = input.getAttribute("data-field");
      var value = input.value.trim();
      if (name === "concepts") {
        card.concepts = value ? value.split(",").map(function (c) { return c.trim(); }).filter(Boolean) : [];
      } else if (name === "dependencies") {
        card.dependencies = value ? value.split("\n").map(function (line) { return line.trim(); }).filter(Boolean)
          .map(function (line) {
            var p = line.split(".");
            var dep = { database: p[0] };
            if (p[1]) dep.schema = p[1];
            if (p[2]) dep.table = p[2];
            if (p[3]) dep.column = p.slice(3).join(".");
            return dep;
          }) : [];
      } else if (value) {
        card[name] = value;
      } else {
        delete card[name];
      }
    });
    return card;
  }

  function entries() {
    var s = state.summary;
    return s.additions.concat(s.updates, s.solved_question ? [s.solved_question] : []);
  }

  function apply(decision) {
    var selected = [];
    if (decision === "apply") {
      entries().forEach(function (entry) {
        var item = document.querySelector('[data-testid=review-item][data-proposal="' + entry.proposal + '"]');
        if (!item || !$("select-" + entry.proposal).checked) return;
        var links = (entry.links || []).filter(function (link, i) {
          var box = item.querySelector('[data-link="' + i + '"]');
          return !box || box.checked;
        });
        selected.push({ proposal: entry.proposal, card: editedCard(item, entry), links: links });
      });
    }
    var review = { decision: decision, proposals_digest: state.summary.proposals_digest, selected: selected };
    var button = $(decision === "apply" ? "apply-review" : "decline-all");
    var label = button.textContent;
    $("apply-review").disabled = true;
    $("decline-all").disabled = true;
    button.textContent = decision === "apply" ? "Saving…" : "Declining…";
    button.classList.add("is-saving");
    $("summary").setAttribute("aria-busy", "true");
    say("saving", decision === "apply" ? "Saving the selection…" : "Recording the decline…");
    var done = function () {
      button.textContent = label;
      button.classList.remove("is-saving");
      $("summary").removeAttribute("aria-busy");
    };
    return api("POST", base() + "/" + encodeURIComponent(state.session) + "/apply", review).then(function (result) {
      done();
      say("ok", result.status === "applied" ? "Saved: the selection is in Memory." : "Declined: nothing was saved.");
      showResult(result);
      return openSession(state.session, true).then(function () { showResult(result); return loadSessions(true); });
    }).catch(function (err) {
      done();
      say("error", "Nothing was saved: " + err.message);
      $("apply-review").disabled = false;
      $("decline-all").disabled = false;
    });
  }

  function showResult(result) {
    $("result").hidden = false;
    $("result-status").textContent = "Outcome: " + result.status + (result.replayed ? " (from the review receipt)" : "") +
      ". Declined proposals: " + (result.declined.length ? result.declined.join(", ") : "none") + ".";
    var list = $("result-cards");
    clear(list);
    result.cards.forEach(function (c) {
      var href = "/admin/memory?workspace=" + encodeURIComponent(state.workspace) + "&card=" + encodeURIComponent(c.card);
      list.appendChild(h("li", { "data-testid": "result-card", "data-card": c.card },
        c.action + " · ", h("a", { href: href, text: c.card }), " (proposal " + c.proposal + ")"));
    });
    showPending(result.index.pending);
  }

  function showReceipt(receipt) {
    var written = receipt.cards.filter(function (c) { return c.action !== "reuse"; }).map(function (c) { return c.card; });
    var memory = "/api/workspaces/" + encodeURIComponent(state.workspace) + "/memory";
    return api("GET", memory + "/pending").then(function (data) {
      var pending = data.items.map(function (p) { return p.card_id; }).filter(function (id) {
        return written.indexOf(id) >= 0;
      });
      showResult({ status: receipt.outcome, replayed: true, cards: receipt.cards, declined: [],
        index: { pending: pending } });
    });
  }

  function showPending(pending) {
    var box = $("result-pending");
    var list = $("pending-cards");
    clear(list);
    box.hidden = !pending.length;
    pending.forEach(function (cardId) {
      list.appendChild(h("li", { "data-testid": "pending-card" }, cardId + " ",
        h("button", { type: "button", class: "button small", "data-testid": "retry-pending", text: "Retry indexing",
          onclick: function () { retry(cardId); } })));
    });
  }

  function retry(cardId) {
    var memory = "/api/workspaces/" + encodeURIComponent(state.workspace) + "/memory";
    return api("POST", memory + "/" + encodeURIComponent(cardId) + "/retry").then(function () {
      say("ok", "Indexed: " + cardId + " is available to recall.");
    }).catch(function (err) {
      var index = err.details && err.details.index;  // 503: the work is still pending
      say("error", index ? "Still pending: " + (index.error || "") : err.message);
    }).then(function () {
      return api("GET", memory + "/pending").then(function (data) {
        var shown = Array.prototype.map.call(document.querySelectorAll("[data-testid=pending-card]"), function (li) {
          return li.firstChild.textContent.trim();
        });
        var still = data.items.map(function (p) { return p.card_id; });
        showPending(shown.filter(function (id) { return still.indexOf(id) >= 0; }));
      });
    });
  }

  // --- start ------------------------------------------------------------------------------

  $("review-workspace").addEventListener("change", function (event) {
    state.workspace = event.target.value;
    loadSessions();
  });
  $("apply-review").addEventListener("click", function () { apply("apply"); });
  $("decline-all").addEventListener("click", function () { apply("decline_all"); });
  var select = $("review-workspace");
  var params = new URLSearchParams(window.location.search);
  var options = Array.prototype.map.call(select.options, function (o) { return o.value; }).filter(Boolean);
  var wanted = params.get("workspace") || "";
  // the URL's workspace when it is one of this user's (else the server says why not), or one restored by the browser
  select.value = options.indexOf(wanted) >= 0 ? wanted : (options.indexOf(select.value) >= 0 ? select.value : "");
  if (select.value) {
    state.workspace = select.value;
    var session = params.get("session");
    loadSessions().then(function () {
      if (session && document.querySelector('[data-testid=session-item][data-session="' + CSS.escape(session) + '"]')) {
        return openSession(session);
      }
      if (session) say("error", "Session “" + session + "” has no Memory proposals in this workspace.");
    });
  } else {
    placeholders();
  }
  $("review-app").setAttribute("data-review-ready", "true");
})();
