/* Thoth Memory administration: login, logout and Memory management.
 *
 * Plain JavaScript, no build step, no external asset. The Content-Security-Policy
 * forbids inline scripts and styles, so every behaviour is attached here and every
 * piece of data reaches the page through textContent (never innerHTML).
 */
(function () {
  "use strict";

  // --- families: fields in display order, label, required ----------------------------

  // Which text fields each family has, in order, and which are required: the server's
  // model, in the page as JSON (base.html). The words for them are the page's own; a
  // field without words here shows its name.
  var CARD_FIELDS = JSON.parse(document.getElementById("card-fields").textContent);
  var FAMILY_WORDS = {
    domain_clarification: {
      label: "Domain clarification",
      hint: "A reusable definition or interpretation, with scope and context.",
      fields: {
        content: ["Clarification", "The definition or interpretation."],
        scope: ["Scope", "Where it applies (e.g. a business area or report)."],
        rationale: ["Rationale", "Why this interpretation holds."],
        context: ["Context", "Background that helps apply it."]
      }
    },
    sql_rule: {
      label: "SQL rule",
      hint: "Guidance for constructing SQL, with scope and rationale.",
      fields: {
        content: ["Rule", "The guidance, stated so that it can be followed."],
        scope: ["Scope", "Where the rule applies."],
        rationale: ["Rationale", "Why the rule exists."],
        sql: ["SQL example", "An example that follows the rule."],
        context: ["Context", "Background that helps apply it."]
      }
    },
    solved_question: {
      label: "Solved question",
      hint: "A question, its approved SQL and context; a consultative exemplar.",
      fields: {
        question: ["Question", "The question as a person asked it."],
        sql: ["Approved SQL", "The SQL that answers it."],
        context: ["Context", "What makes the SQL right for the question."],
        scope: ["Scope", "Where the exemplar applies."],
        content: ["Notes", "Anything else worth knowing."]
      }
    },
    explained_error: {
      label: "Explained error",
      hint: "A correction and its rationale, to avoid repeating a known error.",
      fields: {
        context: ["Error observed", "The error message or the wrong pattern."],
        content: ["Correction", "What to do instead."],
        rationale: ["Rationale", "Why the correction is right."],
        scope: ["Scope", "Where the error occurs."],
        sql: ["Corrected SQL", "The corrected query, if useful."]
      }
    }
  };

  function capitalized(name) { return name.charAt(0).toUpperCase() + name.slice(1); }

  // family -> {label, hint, fields: [[name, label, required, hint], ...]}
  var FAMILIES = {};
  CARD_FIELDS.families.forEach(function (entry) {
    var family = entry[0];
    var words = FAMILY_WORDS[family] || { label: capitalized(family.replace(/_/g, " ")), hint: "", fields: {} };
    FAMILIES[family] = {
      label: words.label,
      hint: words.hint,
      fields: entry[1].map(function (field) {
        var said = words.fields[field[0]] || [capitalized(field[0]), ""];
        return [field[0], said[0], field[1], said[1]];
      })
    };
  });
  var TEXT_FIELDS = CARD_FIELDS.texts;
  var FIELD_LABELS = { title: "Title", family: "Family", concepts: "Concepts", dependencies: "Dependencies",
    links: "Links", revision: "Revision" };

  function familyLabel(family) {
    return FAMILIES[family] ? FAMILIES[family].label : family;
  }

  function fieldLabel(family, name) {
    var spec = FAMILIES[family];
    if (spec) {
      for (var i = 0; i < spec.fields.length; i++) {
        if (spec.fields[i][0] === name) return spec.fields[i][1];
      }
    }
    return FIELD_LABELS[name] || capitalized(name);
  }

  // --- DOM helpers --------------------------------------------------------------------

  function $(id) { return document.getElementById(id); }

  /* h("tag", {attr: value, class: "x", text: "..."}, child, "text", ...) */
  function h(tag, attrs) {
    var el = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (key) {
        var value = attrs[key];
        if (value === null || value === undefined || value === false) return;
        if (key === "text") el.textContent = value;
        else if (key === "class") el.className = value;
        else if (key.slice(0, 2) === "on" && typeof value === "function") el.addEventListener(key.slice(2), value);
        else el.setAttribute(key, value === true ? "" : String(value));
      });
    }
    for (var i = 2; i < arguments.length; i++) append(el, arguments[i]);
    return el;
  }

  function append(el, child) {
    if (child === null || child === undefined || child === false) return;
    if (Array.isArray(child)) { child.forEach(function (c) { append(el, c); }); return; }
    el.appendChild(typeof child === "string" || typeof child === "number" ? document.createTextNode(String(child)) : child);
  }

  function clear(el) { while (el.firstChild) el.removeChild(el.firstChild); }

  function show(el, visible) { el.hidden = !visible; }

  function formatDate(iso) { return window.ThothDates.dateTime(iso); }  // static/dates.js

  /* The list's compact form: the date, then the time (UTC) below it. */
  function shortTime(iso) {
    var text = formatDate(iso);
    var parts = text.split(" ");
    return h("time", { datetime: iso, title: text, class: "short-time" }, h("span", { class: "nowrap", text: parts[0] }),
      parts.length > 1 ? h("span", { class: "muted small nowrap", text: " " + parts.slice(1).join(" ") }) : null);
  }

  function timeEl(iso) { return h("time", { datetime: iso, text: formatDate(iso) }); }

  // --- API ----------------------------------------------------------------------------

  function ApiError(status, body) {
    var error = (body && body.error) || {};
    this.status = status;
    this.code = error.code || "http_" + status;
    this.message = error.message || ("The server answered " + status);
    this.details = error.details === undefined ? null : error.details;
  }

  function csrfToken() {
    var meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.getAttribute("content") : "";
  }

  function api(method, url, body) {
    var headers = { "Accept": "application/json" };
    var init = { method: method, credentials: "same-origin", headers: headers, cache: "no-store" };
    if (method !== "GET" && method !== "HEAD") headers["X-CSRF-Token"] = csrfToken();
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    return fetch(url, init).then(function (response) {
      if (response.status === 204) return null;
      return response.json().catch(function () { return null; }).then(function (data) {
        if (response.status === 401 && url.indexOf("/api/session") !== 0) {
          window.location.assign("/login?next=" + encodeURIComponent(window.location.pathname + window.location.search));
        }
        if (!response.ok) throw new ApiError(response.status, data);
        return data;
      });
    }, function (err) {
      throw new ApiError(0, { error: { code: "network_error", message: "The server cannot be reached (" + err.message + ")." } });
    });
  }

  function query(params) {
    var parts = [];
    Object.keys(params).forEach(function (key) {
      var value = params[key];
      if (value === null || value === undefined || value === "") return;
      (Array.isArray(value) ? value : [value]).forEach(function (v) {
        parts.push(encodeURIComponent(key) + "=" + encodeURIComponent(v));
      });
    });
    return parts.length ? "?" + parts.join("&") : "";
  }

  // --- shared: logout -----------------------------------------------------------------

  function initLogout() {
    var button = $("logout");
    if (!button) return;
    button.addEventListener("click", function () {
      button.disabled = true;
      api("DELETE", "/api/session").then(done, done);
      function done() { window.location.assign("/login"); }
    });
  }

  // --- login page ---------------------------------------------------------------------

  function initLogin() {
    var errorBox = $("login-error");
    // The buttons stay disabled until this script runs: no native (GET) submission
    // could ever put the password in a URL.
    document.querySelectorAll("#login-password button, #login-token button").forEach(function (b) { b.disabled = false; });
    function fail(message) {
      errorBox.textContent = message;
      show(errorBox, true);
    }
    function nextPage() {
      var next = new URLSearchParams(window.location.search).get("next") || "";
      return /^\/admin\/[A-Za-z0-9/_?=&%.-]*$/.test(next) ? next : "/admin/memory";
    }
    function submit(form, body, focusOnError) {
      show(errorBox, false);
      var buttons = form.querySelectorAll("button");
      buttons.forEach(function (b) { b.disabled = true; });
      api("POST", "/api/session", body).then(function () {
        window.location.assign(nextPage());
      }, function (err) {
        buttons.forEach(function (b) { b.disabled = false; });
        fail(err.status === 401 || err.status === 403 ? "Log in failed: " + err.message : err.message);
        focusOnError.focus();
      });
    }
    $("login-password").addEventListener("submit", function (event) {
      event.preventDefault();
      var name = $("login-name").value.trim();
      var password = $("login-pass").value;
      if (!name || !password) {
        fail("Give both the user name and the password.");
        (name ? $("login-pass") : $("login-name")).focus();
        return;
      }
      submit(this, { name: name, password: password }, $("login-pass"));
    });
    $("login-token").addEventListener("submit", function (event) {
      event.preventDefault();
      var token = $("login-token-value").value.trim();
      if (!token) {
        fail("Give the API token.");
        $("login-token-value").focus();
        return;
      }
      submit(this, { token: token }, $("login-token-value"));
    });
  }

  // --- memory page ----------------------------------------------------------------------

  function initMemory() {
    var state = {
      ws: null,
      page: 1,
      total: 0,
      pageSize: 20,
      listSeq: 0,
      card: null,          // the card shown in the detail view (as read)
      mode: "none",        // none | detail | edit | create
      dirty: false,
      pending: [],         // the pending index operations of the workspace
      editLinks: [],       // [{target, meaning, title}]
      concepts: [],
      pendingSeq: 0
    };
    var els = {
      workspace: $("workspace-select"), content: $("workspace-content"), noWorkspace: $("no-workspace"),
      filters: $("filters"), q: $("filter-q"), count: $("result-count"), listError: $("list-error"),
      table: $("card-table"), rows: $("card-rows"), pagination: $("pagination"), pageInfo: $("page-info"),
      feedback: $("feedback"), placeholder: $("panel-placeholder"), detail: $("detail"), detailBody: $("detail-body"),
      editor: $("editor"), editorErrors: $("editor-errors"), pendingList: $("pending-list"),
      pendingCount: $("pending-count"), pendingFeedback: $("pending-feedback"), confirm: $("delete-confirm")
    };

    function wsBase() { return "/api/workspaces/" + encodeURIComponent(state.ws) + "/memory"; }

    // Family names in the static markup come from the server's family ids.
    document.querySelectorAll("[data-family-label]").forEach(function (el) {
      el.textContent = familyLabel(el.getAttribute("data-family-label"));
    });

    // ---- URL state: reloading the page reopens the same view ----

    function readUrl() {
      var params = new URLSearchParams(window.location.search);
      var f = els.filters;
      f.elements.q.value = params.get("q") || "";
      var families = params.getAll("family");
      f.querySelectorAll('input[name="family"]').forEach(function (box) { box.checked = families.indexOf(box.value) >= 0; });
      ["concepts", "origin", "database", "schema", "table", "column", "updated_from", "updated_to", "sort", "order"]
        .forEach(function (name) { f.elements[name].value = params.get(name) || ""; });
      var size = params.get("page_size");
      if (size && ["10", "20", "50", "100"].indexOf(size) >= 0) f.elements.page_size.value = size;
      state.page = Math.max(1, parseInt(params.get("page") || "1", 10) || 1);
      return { workspace: params.get("workspace") || "", card: params.get("card") || "" };
    }

    function writeUrl() {
      var params = {};
      if (state.ws) {
        params.workspace = state.ws;
        var filters = currentFilters();
        Object.keys(filters).forEach(function (k) { params[k] = filters[k]; });
        if (state.page > 1) params.page = state.page;
        if (state.card && state.mode !== "create") params.card = state.card.id;
      }
      window.history.replaceState(null, "", window.location.pathname + query(params));
    }

    // ---- feedback ----

    function setFeedback(box, kind, message, detail) {
      clear(box);
      box.className = "feedback " + kind;
      box.setAttribute("data-status", kind);
      append(box, h("strong", { text: message }));
      if (detail) append(box, h("span", { class: "feedback-detail", text: " " + detail }));
      show(box, true);
    }

    function clearFeedback(box) { clear(box); show(box, false); box.removeAttribute("data-status"); }

    function indexFeedback(box, result, savedText, cardId) {
      box.setAttribute("data-card", cardId || "");
      if (result.status === "saved") {
        setFeedback(box, "saved", savedText);
      } else {
        setFeedback(box, "incomplete", savedText + " — index update incomplete.",
          (result.index && result.index.error ? "Index error: " + result.index.error + ". " : "") +
          "The archive holds the change; recall will not use it until the index is updated (see Pending index updates).");
      }
    }

    // ---- guard: an open edit is never discarded silently ----

    function blockedByEdit() {
      if ((state.mode === "edit" || state.mode === "create") && state.dirty) {
        setFeedback(els.feedback, "warning", "You have unsaved changes.", "Save them or press Cancel to discard them first.");
        $("save-card").focus();
        return true;
      }
      return false;
    }

    // ---- workspace ----

    function chooseWorkspace(id, cardId) {
      state.ws = id || null;
      state.card = null;
      state.pending = [];
      show($("pending-jump"), false);
      setMode("none");
      clearFeedback(els.feedback);
      clearFeedback(els.pendingFeedback);
      show(els.content, !!state.ws);
      show(els.noWorkspace, !state.ws);
      if (!state.ws) { writeUrl(); return; }
      loadList();
      loadPending();
      if (cardId) openCard(cardId, { focus: false });
      else writeUrl();
    }

    els.workspace.addEventListener("change", function () {
      if (blockedByEdit()) { els.workspace.value = state.ws || ""; return; }
      state.page = 1;
      chooseWorkspace(els.workspace.value, null);
    });

    // ---- list ----

    function splitList(text) {
      var seen = [];
      String(text || "").split(",").forEach(function (part) {
        var v = part.trim();
        if (v && seen.indexOf(v) < 0) seen.push(v);
      });
      return seen;
    }

    function currentFilters() {
      var f = els.filters.elements;
      var filters = {};
      var q = f.q.value.trim();
      if (q) filters.q = q;
      var families = [];
      els.filters.querySelectorAll('input[name="family"]:checked').forEach(function (box) { families.push(box.value); });
      if (families.length) filters.family = families;
      var concepts = splitList(f.concepts.value);
      if (concepts.length) filters.concepts = concepts;
      ["origin", "database", "schema", "table", "column", "updated_from", "updated_to", "order"].forEach(function (name) {
        var v = f[name].value.trim();
        if (v) filters[name] = v;
      });
      var sort = f.sort.value;
      if (sort && !(sort === "relevance" && !q)) filters.sort = sort;
      if (f.page_size.value !== "20") filters.page_size = f.page_size.value;
      return filters;
    }

    function loadList() {
      if (!state.ws) return Promise.resolve();
      var seq = ++state.listSeq;
      var filters = currentFilters();
      filters.page = state.page;
      filters.page_size = els.filters.elements.page_size.value;
      els.table.setAttribute("aria-busy", "true");
      els.count.setAttribute("data-loading", "true");
      return api("GET", wsBase() + query(filters)).then(function (data) {
        if (seq !== state.listSeq) return;
        show(els.listError, false);
        var pages = Math.max(1, Math.ceil(data.total / data.page_size));
        if (data.items.length === 0 && data.total > 0 && state.page > pages) {
          state.page = pages;  // the last page emptied (e.g. after a deletion)
          loadList();
          return;
        }
        state.total = data.total;
        state.pageSize = data.page_size;
        updateFilterSummary();
        renderList(data);
        writeUrl();
      }, function (err) {
        if (seq !== state.listSeq) return;
        clear(els.rows);
        show(els.table, false);
        show(els.pagination, false);
        els.count.textContent = "";
        els.listError.textContent = (err.status === 503 ? "The archive is unavailable: " : "The cards cannot be listed: ") + err.message;
        show(els.listError, true);
      }).then(function () {
        if (seq !== state.listSeq) return;
        els.table.removeAttribute("aria-busy");
        els.count.removeAttribute("data-loading");
      });
    }

    function renderList(data) {
      clear(els.rows);
      var pages = Math.max(1, Math.ceil(data.total / data.page_size));
      els.count.textContent = data.total === 1 ? "1 card" : data.total + " cards";
      els.count.setAttribute("data-total", String(data.total));
      if (data.total === 0) {
        append(els.count, h("span", { class: "muted", text: currentFiltersActive() ? " match the search and filters." : " in this workspace yet." }));
      }
      show(els.table, data.items.length > 0);
      data.items.forEach(function (item) {
        var url = window.location.pathname + query({ workspace: state.ws, card: item.id });
        var link = h("a", { href: url, class: "card-link", "data-card-id": item.id, text: item.title });
        link.addEventListener("click", function (event) {
          if (event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;
          event.preventDefault();
          if (blockedByEdit()) return;
          openCard(item.id, { focus: true });
        });
        var summary = h("div", { class: "card-cell" }, link,
          item.scope ? h("div", { class: "muted small", text: item.scope }) : null,
          item.concepts.length ? h("ul", { class: "chips small", "aria-label": "Concepts" },
            item.concepts.map(function (c) { return h("li", { class: "chip", text: c }); })) : null);
        var index = item.pending
          ? h("span", { class: "badge warning", title: "Index update pending (" + item.pending + ")", text: "Pending" })
          : h("span", { class: "badge ok", text: "Current" });
        var row = h("tr", { "data-card-id": item.id, "data-testid": "card-row" },
          h("td", { "data-label": "Card" }, summary),
          h("td", { "data-label": "Family", class: "badge-cell" },
            h("span", { class: "badge family-" + item.family, text: familyLabel(item.family) }),
            h("div", { class: "muted small", "data-origin": item.import_id ? "imported" : item.origin, text: item.import_id ? "Imported" : item.origin === "workflow" ? "Workflow" : "Manual" })),
          h("td", { "data-label": "Updated" }, shortTime(item.updated_at), h("div", { class: "muted small", text: "rev. " + item.revision })),
          h("td", { "data-label": "Index" }, index));
        if (state.card && state.card.id === item.id) row.setAttribute("aria-current", "true");
        els.rows.appendChild(row);
      });
      var from = data.total ? (data.page - 1) * data.page_size + 1 : 0;
      var to = (data.page - 1) * data.page_size + data.items.length;
      els.pageInfo.textContent = "Page " + data.page + " of " + pages + (data.total ? (from === to ? " (card " + from + ")" : " (cards " + from + "–" + to + ")") : "");
      els.pageInfo.setAttribute("data-page", String(data.page));
      els.pageInfo.setAttribute("data-pages", String(pages));
      show(els.pagination, data.total > 0);
      $("page-first").disabled = $("page-prev").disabled = data.page <= 1;
      $("page-next").disabled = $("page-last").disabled = data.page >= pages;
    }

    function currentFiltersActive() {
      var filters = currentFilters();
      delete filters.sort; delete filters.order; delete filters.page_size;
      return Object.keys(filters).length > 0;
    }

    /* How many filters (beyond the search text) are set: shown on the collapsed panel. */
    function activeFilterCount() {
      var filters = currentFilters();
      var n = 0;
      ["family", "concepts", "origin", "database", "schema", "table", "column", "updated_from", "updated_to"].forEach(function (k) {
        if (filters[k]) n += 1;
      });
      return n;
    }

    function updateFilterSummary() {
      var n = activeFilterCount();
      $("filter-summary").textContent = n ? "(" + n + " active)" : "(none)";
    }

    function markSelectedRow() {
      els.rows.querySelectorAll("tr").forEach(function (row) {
        if (state.card && row.getAttribute("data-card-id") === state.card.id) row.setAttribute("aria-current", "true");
        else row.removeAttribute("aria-current");
      });
    }

    /* "Updated from" after "Updated to" would match nothing: say so at the fields. */
    function dateRangeValid() {
      var f = els.filters.elements;
      var from = f.updated_from.value, to = f.updated_to.value;
      var wrong = !!(from && to && from > to);
      var message = $("filter-date-error");
      [f.updated_from, f.updated_to].forEach(function (input) {
        if (wrong) input.setAttribute("aria-invalid", "true"); else input.removeAttribute("aria-invalid");
      });
      message.textContent = wrong ? "“Updated from” (" + from + ") is after “Updated to” (" + to + "): swap them or clear one." : "";
      show(message, wrong);
      return !wrong;
    }

    els.filters.addEventListener("submit", function (event) {
      event.preventDefault();
      if (!dateRangeValid()) { els.filters.elements.updated_from.focus(); return; }
      state.page = 1;
      loadList();
    });
    ["filter-updated-from", "filter-updated-to"].forEach(function (id) {
      $(id).addEventListener("change", dateRangeValid);
    });
    ["filter-sort", "filter-order", "filter-page-size"].forEach(function (id) {
      $(id).addEventListener("change", function () { state.page = 1; loadList(); });
    });
    $("filters-reset").addEventListener("click", function () {
      els.filters.reset();
      state.page = 1;
      loadList();
    });
    function goTo(page) {
      var pages = Math.max(1, Math.ceil(state.total / state.pageSize));
      state.page = Math.min(Math.max(1, page), pages);
      loadList();
    }
    $("page-first").addEventListener("click", function () { goTo(1); });
    $("page-prev").addEventListener("click", function () { goTo(state.page - 1); });
    $("page-next").addEventListener("click", function () { goTo(state.page + 1); });
    $("page-last").addEventListener("click", function () { goTo(Math.ceil(state.total / state.pageSize)); });

    // ---- panel modes ----

    function setMode(mode) {
      state.mode = mode;
      show(els.placeholder, mode === "none");
      show(els.detail, mode === "detail");
      show(els.editor, mode === "edit" || mode === "create");
      if (mode !== "detail") hideConfirm(false);
      if (mode !== "edit" && mode !== "create") state.dirty = false;
    }

    // ---- detail ----

    function openCard(id, options) {
      options = options || {};
      return api("GET", wsBase() + "/" + encodeURIComponent(id)).then(function (card) {
        state.card = card;
        clearFeedback(els.feedback);
        renderDetail();
        setMode("detail");
        markSelectedRow();
        writeUrl();
        if (options.focus) $("detail-title").focus();
      }, function (err) {
        state.card = null;
        setMode("none");
        setFeedback(els.feedback, "error", err.status === 404 ? "This card does not exist (any more)." : "The card cannot be read.", err.message);
        writeUrl();
      });
    }

    function pendingFor(id) {
      for (var i = 0; i < state.pending.length; i++) if (state.pending[i].card_id === id) return state.pending[i];
      return null;
    }

    function cardLink(id, title) {
      var a = h("a", { href: window.location.pathname + query({ workspace: state.ws, card: id }), "data-card-id": id,
        text: title || id });
      a.addEventListener("click", function (event) {
        if (event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;
        event.preventDefault();
        if (blockedByEdit()) return;
        openCard(id, { focus: true });
      });
      return a;
    }

    function term(label, value, attrs) {
      var dd = h("dd", attrs || null);
      if (value === null || value === undefined || value === "") append(dd, h("span", { class: "muted", text: "—" }));
      else append(dd, value);
      return [h("dt", { text: label }), dd];
    }

    function renderIndexStatus(container) {
      clear(container);
      var card = state.card;
      var item = card ? pendingFor(card.id) : null;
      if (!item) {
        append(container, h("span", { class: "badge ok", "data-index": "current", text: "Current" }),
          " ", h("span", { class: "muted", text: "not in the pending index updates" }));
        return;
      }
      append(container,
        h("span", { class: "badge warning", "data-index": "pending", text: item.operation === "delete" ? "Index removal pending" : "Index update pending" }), " ",
        h("span", { class: "muted", text: "attempts: " + item.attempts + (item.reason === "projection_outdated" ? " · index outdated" : "") }),
        item.last_error ? h("div", { class: "error-text small", text: item.last_error }) : null,
        h("button", { type: "button", class: "button secondary small", "data-testid": "detail-retry",
          onclick: function () { retry(card.id, card.title); }, text: "Retry index update" }));
    }

    function renderDetail() {
      var card = state.card;
      $("detail-title").textContent = card.title;
      $("detail-family").textContent = familyLabel(card.family);
      var body = els.detailBody;
      clear(body);
      var spec = FAMILIES[card.family] || { fields: [] };
      var main = h("dl", { class: "fields", "data-testid": "detail-fields" });
      spec.fields.forEach(function (f) {
        var value = card[f[0]];
        var content = value ? (f[0] === "sql" ? h("pre", { class: "code", text: value }) : h("div", { class: "prose", text: value })) : null;
        append(main, term(f[1], content, { "data-detail": f[0] }));
      });
      append(main, term("Concepts", card.concepts.length ? h("ul", { class: "chips" },
        card.concepts.map(function (c) { return h("li", { class: "chip", text: c }); })) : null, { "data-detail": "concepts" }));
      body.appendChild(main);

      body.appendChild(h("h3", { text: "Dependencies" }));
      if (card.dependencies.length) {
        body.appendChild(h("div", { class: "table-wrap" }, h("table", { class: "data-table compact", "data-testid": "detail-dependencies" },
          h("thead", null, h("tr", null, ["Database", "Schema", "Table", "Column"].map(function (t) { return h("th", { scope: "col", text: t }); }))),
          h("tbody", null, card.dependencies.map(function (d) {
            return h("tr", null, [d.database, d.schema, d.table, d.column].map(function (v, i) {
              return h("td", { "data-label": ["Database", "Schema", "Table", "Column"][i], text: v || "—" });
            }));
          })))));
      } else {
        body.appendChild(h("p", { class: "muted", text: "No dependencies." }));
      }

      body.appendChild(h("h3", { text: "Links to other cards" }));
      if (card.links.length) {
        body.appendChild(h("ul", { class: "link-list", "data-testid": "detail-links" }, card.links.map(function (l) {
          return h("li", { "data-target": l.target }, h("span", { class: "meaning", text: l.meaning }), " → ",
            cardLink(l.target, l.target_title), " ", h("span", { class: "muted small mono", text: l.target }));
        })));
      } else {
        body.appendChild(h("p", { class: "muted", text: "No outgoing links." }));
      }
      body.appendChild(h("h3", { text: "Linked from" }));
      if (card.incoming_links.length) {
        body.appendChild(h("ul", { class: "link-list", "data-testid": "detail-incoming" }, card.incoming_links.map(function (l) {
          return h("li", { "data-source": l.source }, cardLink(l.source, l.source_title), " ",
            h("span", { class: "muted small mono", text: l.source }), " ", h("span", { class: "meaning", text: l.meaning }), " → this card");
        })));
      } else {
        body.appendChild(h("p", { class: "muted", text: "No incoming links." }));
      }

      body.appendChild(h("h3", { text: "Record" }));
      var source = null;
      if (card.source) {
        source = h("div", null,
          h("div", null, "Session: ", h("span", { class: "mono", text: card.source.session || "—" })),
          h("div", null, "Decisions: ", h("span", { class: "mono", text: card.source.decisions && card.source.decisions.length ? card.source.decisions.join(", ") : "—" })));
      } else if (card.origin === "manual" && !card.imported) {
        source = h("span", { class: "muted", text: "None: created manually" });
      }
      // an imported card was not reviewed here, whatever origin its file recorded
      var origin = card.origin === "workflow" ? "Workflow" : "Manual";
      var imported = card.imported
        ? h("div", null,
            h("div", null, "File: ", h("span", { class: "mono", text: card.imported.file || "—" }), " (" + card.imported.format + ")"),
            h("div", null, "At: ", timeEl(card.imported.at), card.imported.by ? " by " + card.imported.by : ""),
            h("div", null, "Import: ", h("code", { class: "mono", text: card.imported.id })))
        : null;
      var indexStatus = h("div", { id: "detail-index", "data-testid": "detail-index" });
      var meta = h("dl", { class: "fields meta", "data-testid": "detail-meta" },
        term("ID", h("code", { class: "mono", text: card.id }), { "data-detail": "id" }),
        term("Origin", card.imported ? "Imported (recorded as " + origin.toLowerCase() + ")" : origin, { "data-detail": "origin" }),
        term("Source", source, { "data-detail": "source" }),
        imported ? term("Imported", imported, { "data-detail": "imported" }) : null,
        term("Revision", String(card.revision), { "data-detail": "revision", "data-testid": "detail-revision" }),
        term("Created", timeEl(card.created_at), { "data-detail": "created_at" }),
        term("Updated", timeEl(card.updated_at), { "data-detail": "updated_at" }),
        [h("dt", { text: "Index status" }), h("dd", null, indexStatus)]);
      body.appendChild(meta);
      renderIndexStatus(indexStatus);
    }

    $("close-detail").addEventListener("click", function () {
      state.card = null;
      setMode("none");
      markSelectedRow();
      writeUrl();
      els.q.focus();
    });

    // ---- delete with confirmation ----

    function showConfirm() {
      var card = state.card;
      var links = card.links.length + card.incoming_links.length;
      $("delete-confirm-text").textContent = "“" + card.title + "” will be removed from the archive and from recall, with its " +
        card.dependencies.length + " dependenc" + (card.dependencies.length === 1 ? "y" : "ies") + " and " + links +
        " link" + (links === 1 ? "" : "s") + " to or from other cards. The other cards are kept. This cannot be undone.";
      show($("delete-error"), false);
      show(els.confirm, true);
      $("delete-card").setAttribute("aria-expanded", "true");
      $("cancel-delete").focus();
    }

    function hideConfirm(focus) {
      if (els.confirm.hidden) return;
      show(els.confirm, false);
      $("delete-card").setAttribute("aria-expanded", "false");
      if (focus) $("delete-card").focus();
    }

    $("delete-card").addEventListener("click", function () {
      if (els.confirm.hidden) showConfirm(); else hideConfirm(true);
    });
    $("cancel-delete").addEventListener("click", function () { hideConfirm(true); });
    els.confirm.addEventListener("keydown", function (event) {
      if (event.key === "Escape") { event.preventDefault(); hideConfirm(true); }
    });
    $("confirm-delete").addEventListener("click", function () {
      var card = state.card;
      var button = this;
      button.disabled = true;
      api("DELETE", wsBase() + "/" + encodeURIComponent(card.id) + query({ revision: card.revision })).then(function (result) {
        button.disabled = false;
        state.card = null;
        setMode("none");
        indexFeedback(els.feedback, result, "Deleted “" + card.title + "”", card.id);
        loadList();
        loadPending();
        els.q.focus();
      }, function (err) {
        button.disabled = false;
        var box = $("delete-error");
        box.textContent = err.code === "stale_revision"
          ? "The card changed since you opened it: " + err.message + ". Reopen it before deleting."
          : "The card was not deleted: " + err.message;
        show(box, true);
      });
    });

    // ---- editor ----

    var editor = els.editor;
    var fieldBoxes = {};
    editor.querySelectorAll("[data-field]").forEach(function (box) { fieldBoxes[box.getAttribute("data-field")] = box; });

    function applyFamily(family) {
      var spec = FAMILIES[family];
      $("edit-family-hint").textContent = spec ? spec.hint : "Choose a family to see its fields.";
      var container = $("family-fields");
      TEXT_FIELDS.forEach(function (name) { show(fieldBoxes[name], false); });
      if (!spec) return;
      spec.fields.forEach(function (f) {
        var box = fieldBoxes[f[0]];
        var input = box.querySelector("input, textarea");
        box.querySelector(".label-text").textContent = f[1];
        show(box.querySelector(".req"), f[2]);
        input.required = f[2];
        input.setAttribute("aria-required", f[2] ? "true" : "false");
        box.querySelector(".hint").textContent = (f[3] + (f[2] ? "" : " Optional.")).trim();
        container.appendChild(box);  // family order
        show(box, true);
      });
    }

    $("edit-family").addEventListener("change", function () { applyFamily(this.value); });
    editor.addEventListener("input", function () { state.dirty = true; });
    editor.addEventListener("change", function () { state.dirty = true; });

    function startEdit(card) {
      clearFeedback(els.feedback);
      clearErrors();
      editor.reset();
      state.concepts = card ? card.concepts.slice() : [];
      state.editLinks = card ? card.links.map(function (l) { return { target: l.target, meaning: l.meaning, title: l.target_title }; }) : [];
      clear($("dep-rows"));
      if (card) {
        $("edit-family").value = card.family;
        $("edit-title").value = card.title;
        TEXT_FIELDS.forEach(function (name) { $("edit-" + name).value = card[name] || ""; });
        card.dependencies.forEach(addDependencyRow);
      }
      applyFamily(card ? card.family : "");
      renderConcepts();
      renderDependencyTable();
      renderLinkRows();
      clear($("link-results"));
      $("link-search-status").textContent = "";
      $("editor-heading").textContent = card ? "Edit “" + card.title + "”" : "New card";
      $("save-card").textContent = card ? "Save changes" : "Create card";
      setMode(card ? "edit" : "create");
      state.dirty = false;
      writeUrl();
      (card ? $("edit-title") : $("edit-family")).focus();
    }

    // A new card prefilled from the Recall quality page's gap (draft=1 and draft_* in
    // the URL): the curator reviews it, then creates it.
    function startDraft(params) {
      if (params.get("draft") !== "1") return;
      var family = params.get("draft_family") || "";
      startEdit(null);
      if (FAMILIES[family]) { $("edit-family").value = family; applyFamily(family); }
      $("edit-title").value = (params.get("draft_title") || "").slice(0, 300);
      ["content", "question"].forEach(function (name) {
        if (params.get("draft_" + name)) $("edit-" + name).value = params.get("draft_" + name);
      });
      state.dirty = true;
      setFeedback(els.feedback, "info", "A draft from a gap agents asked about.",
        "Write what they needed to know, then Create card.");
      $("edit-title").focus();
    }

    $("new-card").addEventListener("click", function () {
      if (blockedByEdit()) return;
      hideConfirm(false);
      startEdit(null);
    });
    $("edit-card").addEventListener("click", function () { startEdit(state.card); });

    $("cancel-edit").addEventListener("click", function () {
      var wasCreate = state.mode === "create";
      state.dirty = false;
      clearErrors();
      if (!wasCreate && state.card) {
        setMode("detail");
        renderDetail();
        setFeedback(els.feedback, "info", "Changes discarded.", "Nothing was saved.");
        $("edit-card").focus();
      } else {
        setMode(state.card ? "detail" : "none");
        if (state.card) renderDetail();
        setFeedback(els.feedback, "info", "New card discarded.", "Nothing was saved.");
        $("new-card").focus();
      }
      writeUrl();
    });

    // concepts

    function renderConcepts() {
      var list = $("concept-chips");
      clear(list);
      state.concepts.forEach(function (concept, i) {
        list.appendChild(h("li", { class: "chip" }, h("span", { text: concept }),
          h("button", { type: "button", class: "chip-remove", "aria-label": "Remove concept " + concept, title: "Remove",
            onclick: function () {
              state.concepts.splice(i, 1);
              state.dirty = true;
              renderConcepts();
              $("concept-input").focus();
            }, text: "×" })));
      });
      show(list, state.concepts.length > 0);
    }

    function addConcepts() {
      var input = $("concept-input");
      var added = false;
      splitList(input.value).forEach(function (c) {
        if (state.concepts.indexOf(c) < 0) { state.concepts.push(c); added = true; }
      });
      input.value = "";
      if (added) state.dirty = true;
      renderConcepts();
    }

    $("concept-add").addEventListener("click", function () { addConcepts(); $("concept-input").focus(); });
    $("concept-input").addEventListener("keydown", function (event) {
      if (event.key === "Enter") { event.preventDefault(); addConcepts(); }
    });

    // dependencies

    var DEP_PARTS = [["database", "Database"], ["schema", "Schema"], ["table", "Table"], ["column", "Column"]];

    function renderDependencyTable() {
      var rows = $("dep-rows").querySelectorAll("li");
      show($("dep-rows"), rows.length > 0);
      rows.forEach(function (row, i) {
        row.querySelectorAll(".dep-suffix").forEach(function (span) { span.textContent = ", dependency " + (i + 1); });
        row.querySelector("button").setAttribute("aria-label", "Remove dependency " + (i + 1));
      });
    }

    var depSeq = 0;

    function addDependencyRow(dep) {
      dep = dep || {};
      var row = h("li", { class: "dep-row", "data-testid": "dep-row" });
      var grid = h("div", { class: "dep-grid" });
      DEP_PARTS.forEach(function (part) {
        var id = "dep-" + (++depSeq) + "-" + part[0];
        grid.appendChild(h("div", { class: "field" },
          h("label", { for: id }, part[1], h("span", { class: "visually-hidden dep-suffix" }),
            part[0] === "database" ? h("span", { class: "req", "aria-hidden": "true", text: " *" }) : null),
          h("input", { id: id, type: "text", maxlength: "128", autocomplete: "off", spellcheck: "false",
            "data-part": part[0], value: dep[part[0]] || "" })));
      });
      row.appendChild(grid);
      row.appendChild(h("button", { type: "button", class: "button secondary small", text: "Remove",
        onclick: function () {
          var next = row.nextElementSibling || row.previousElementSibling;
          row.parentNode.removeChild(row);
          state.dirty = true;
          renderDependencyTable();
          (next ? next.querySelector("input") : $("dep-add")).focus();
        } }));
      $("dep-rows").appendChild(row);
      return row;
    }

    $("dep-add").addEventListener("click", function () {
      var row = addDependencyRow(null);
      renderDependencyTable();
      state.dirty = true;
      row.querySelector("input").focus();
    });

    // links

    function renderLinkRows() {
      var list = $("link-rows");
      clear(list);
      state.editLinks.forEach(function (link, i) {
        var inputId = "link-meaning-" + i;
        var input = h("input", { id: inputId, type: "text", maxlength: "200", autocomplete: "off", value: link.meaning || "",
          "data-target": link.target, "data-testid": "link-meaning", "aria-required": "true" });
        input.addEventListener("input", function () { link.meaning = input.value; });
        list.appendChild(h("li", { class: "link-row", "data-target": link.target, "data-testid": "link-row" },
          h("div", { class: "link-target" }, h("span", { class: "muted", text: "Links to " }),
            h("strong", { text: link.title || link.target }), " ", h("span", { class: "muted small mono", text: link.target })),
          h("div", { class: "inline" },
            h("label", { for: inputId, text: "Meaning" }, h("span", { class: "req", "aria-hidden": "true", text: " *" }),
              h("span", { class: "visually-hidden", text: " of the link to " + (link.title || link.target) })),
            input,
            h("button", { type: "button", class: "button secondary small", "aria-label": "Remove link to " + (link.title || link.target),
              text: "Remove", onclick: function () {
                state.editLinks.splice(i, 1);
                state.dirty = true;
                renderLinkRows();
                $("link-search-input").focus();
              } }))));
      });
      show($("links-empty"), state.editLinks.length === 0);
    }

    function searchLinkTargets() {
      var text = $("link-search-input").value.trim();
      var status = $("link-search-status");
      var results = $("link-results");
      clear(results);
      if (!text) { status.textContent = "Type a text or a card ID to find a card."; return; }
      status.textContent = "Searching…";
      api("GET", wsBase() + query({ q: text, page_size: 10 })).then(function (data) {
        var self = state.mode === "edit" && state.card ? state.card.id : null;
        var linked = state.editLinks.map(function (l) { return l.target; });
        var items = data.items.filter(function (item) { return item.id !== self && linked.indexOf(item.id) < 0; });
        status.textContent = items.length ? items.length + " card" + (items.length === 1 ? "" : "s") + " found (of " + data.total + ")."
          : "No other card matches.";
        items.forEach(function (item) {
          results.appendChild(h("li", { "data-card-id": item.id, "data-testid": "link-result" },
            h("div", null, h("strong", { text: item.title }), " ", h("span", { class: "badge family-" + item.family, text: familyLabel(item.family) }),
              h("div", { class: "muted small mono", text: item.id })),
            h("button", { type: "button", class: "button secondary small", "aria-label": "Link to " + item.title, text: "Link",
              onclick: function () {
                state.editLinks.push({ target: item.id, meaning: "", title: item.title });
                state.dirty = true;
                clear(results);
                status.textContent = "Link added: give its meaning.";
                renderLinkRows();
                var inputs = $("link-rows").querySelectorAll("input");
                inputs[inputs.length - 1].focus();
              } })));
        });
      }, function (err) {
        status.textContent = "Search failed: " + err.message;
      });
    }

    $("link-search-button").addEventListener("click", searchLinkTargets);
    $("link-search-input").addEventListener("keydown", function (event) {
      if (event.key === "Enter") { event.preventDefault(); searchLinkTargets(); }
    });

    // collect, validate, save

    function clearErrors() {
      clear(els.editorErrors);
      show(els.editorErrors, false);
      editor.querySelectorAll("[aria-invalid]").forEach(function (el) { el.removeAttribute("aria-invalid"); });
    }

    function showErrors(title, problems, extra) {
      clearErrors();
      append(els.editorErrors, h("strong", { text: title }));
      if (problems.length) {
        append(els.editorErrors, h("ul", null, problems.map(function (p) { return h("li", { text: p.text }); })));
        problems.forEach(function (p) { if (p.input) p.input.setAttribute("aria-invalid", "true"); });
      }
      if (extra) append(els.editorErrors, extra);
      show(els.editorErrors, true);
      els.editorErrors.scrollIntoView({ block: "nearest" });
      var first = problems.filter(function (p) { return p.input; })[0];
      if (first) first.input.focus();
    }

    function collect() {
      var problems = [];
      var family = $("edit-family").value;
      var body = { family: family };
      if (!FAMILIES[family]) problems.push({ text: "Choose the card's family.", input: $("edit-family") });
      var title = $("edit-title").value.trim();
      if (!title) problems.push({ text: "Title is required.", input: $("edit-title") });
      body.title = title;
      if (FAMILIES[family]) {
        FAMILIES[family].fields.forEach(function (f) {
          var input = $("edit-" + f[0]);
          var value = input.value.trim();
          if (value) body[f[0]] = value;
          else if (f[2]) problems.push({ text: f[1] + " is required for a " + FAMILIES[family].label.toLowerCase() + ".", input: input });
        });
      }
      addConcepts();
      body.concepts = state.concepts.slice();
      body.dependencies = [];
      $("dep-rows").querySelectorAll("li").forEach(function (row, i) {
        var dep = {};
        var inputs = {};
        row.querySelectorAll("input").forEach(function (input) {
          inputs[input.getAttribute("data-part")] = input;
          dep[input.getAttribute("data-part")] = input.value.trim() || null;
        });
        if (!dep.database && !dep.schema && !dep.table && !dep.column) return;
        var n = "Dependency " + (i + 1) + ": ";
        if (!dep.database) problems.push({ text: n + "the database is required.", input: inputs.database });
        else if (dep.table && !dep.schema) problems.push({ text: n + "a table needs its schema.", input: inputs.schema });
        else if (dep.column && !dep.table) problems.push({ text: n + "a column needs its table.", input: inputs.table });
        var clean = {};  // levels left empty are omitted, not sent as null
        DEP_PARTS.forEach(function (part) { if (dep[part[0]]) clean[part[0]] = dep[part[0]]; });
        body.dependencies.push(clean);
      });
      body.links = state.editLinks.map(function (link, i) {
        var meaning = (link.meaning || "").trim();
        if (!meaning) problems.push({ text: "Give the meaning of the link to “" + (link.title || link.target) + "”.", input: $("link-meaning-" + i) });
        return { target: link.target, meaning: meaning };
      });
      if (state.mode === "edit") body.revision = state.card.revision;
      return { body: body, problems: problems };
    }

    function apiProblems(err) {
      var problems = [];
      if (Array.isArray(err.details)) {
        err.details.forEach(function (d) {
          if (!d || typeof d !== "object" || !d.message) return;
          var field = String(d.field || "");
          var first = field.split(".")[0];
          if (FAMILIES[first]) field = field.slice(first.length + 1);  // the API's union branch
          var top = field.split(/[.[]/)[0];
          var input = TEXT_FIELDS.indexOf(top) >= 0 || top === "title" || top === "family" ? $("edit-" + top) : null;
          if (top === "concepts") input = $("concept-input");
          var label = field ? fieldLabel($("edit-family").value, top) + field.slice(top.length) + ": " : "";
          problems.push({ text: label + d.message, input: input });
        });
      }
      return problems;
    }

    editor.addEventListener("submit", function (event) {
      event.preventDefault();
      var collected = collect();
      if (collected.problems.length) {
        showErrors("The card cannot be saved yet:", collected.problems);
        return;
      }
      clearErrors();
      var editing = state.mode === "edit";
      var button = $("save-card");
      var label = button.textContent;
      button.disabled = true;
      button.textContent = "Saving…";  // a save waits for the archive and then the index
      button.classList.add("is-saving");
      editor.setAttribute("aria-busy", "true");
      var request = editing
        ? api("PUT", wsBase() + "/" + encodeURIComponent(state.card.id), collected.body)
        : api("POST", wsBase(), collected.body);
      request.then(function (result) {
        state.dirty = false;
        state.card = result.card;
        renderDetail();
        setMode("detail");
        indexFeedback(els.feedback, result, editing ? "Saved" : "Saved (new card)", result.card.id);
        writeUrl();
        loadList();
        loadPending();
        $("detail-title").focus();
      }, function (err) {
        if (err.code === "stale_revision") {
          var reload = h("button", { type: "button", class: "button secondary small", "data-testid": "reload-card",
            text: "Reload the card (discards your changes)", onclick: function () {
              state.dirty = false;
              openCard(state.card.id, { focus: true });
            } });
          showErrors("Not saved: someone changed this card since you opened it.", [{ text: err.message }], h("p", null, reload));
        } else if (err.status === 422) {
          var problems = apiProblems(err);
          showErrors("Not saved: the server refused the card.", problems.length ? problems : [{ text: err.message }]);
        } else {
          showErrors("Not saved.", [{ text: err.message }]);
        }
      }).then(function () {
        button.disabled = false;
        button.textContent = label;
        button.classList.remove("is-saving");
        editor.removeAttribute("aria-busy");
      });
    });

    // ---- pending index updates ----

    function loadPending() {
      if (!state.ws) return Promise.resolve();
      var seq = ++state.pendingSeq;
      els.pendingList.setAttribute("aria-busy", "true");
      return api("GET", wsBase() + "/pending").then(function (data) {
        if (seq !== state.pendingSeq) return;
        state.pending = data.items;
        renderPending();
      }, function (err) {
        if (seq !== state.pendingSeq) return;
        clear(els.pendingList);
        els.pendingCount.textContent = "The pending index updates cannot be read: " + err.message;
      }).then(function () {
        if (seq === state.pendingSeq) els.pendingList.removeAttribute("aria-busy");
      });
    }

    function renderPending() {
      clear(els.pendingList);
      var items = state.pending;
      els.pendingCount.textContent = items.length ? items.length + " pending" : "No pending index updates: recall uses every saved card.";
      els.pendingCount.setAttribute("data-count", String(items.length));
      $("pending-jump-link").textContent = items.length === 1 ? "1 pending index update: see Pending index updates"
        : items.length + " pending index updates: see Pending index updates";
      show($("pending-jump"), items.length > 0);
      items.forEach(function (item) {
        var name = item.title
          ? [cardLink(item.card_id, item.title), " ", h("span", { class: "muted small mono", text: item.card_id })]
          : [h("span", { class: "mono", text: item.card_id }), " ", h("span", { class: "badge", text: "deleted card" })];
        var what = item.operation === "delete" ? "Remove from the index" : "Update the index";
        els.pendingList.appendChild(h("li", { class: "pending-item", "data-card-id": item.card_id, "data-testid": "pending-item" },
          h("div", { class: "pending-name" }, name),
          h("div", { class: "muted small", text: what + " · revision " + item.revision + " · attempts: " + item.attempts +
            (item.reason === "projection_outdated" ? " · index outdated" : "") +
            (item.updated_at ? " · last tried " + formatDate(item.updated_at) : "") }),
          item.last_error ? h("div", { class: "error-text small", text: item.last_error }) : null,
          h("button", { type: "button", class: "button secondary small", "data-testid": "pending-retry",
            "aria-label": "Retry the index update of " + (item.title || item.card_id + " (deleted card)"), text: "Retry",
            onclick: function () { retry(item.card_id, item.title); } })));
      });
      if (state.mode === "detail" && $("detail-index")) renderIndexStatus($("detail-index"));
    }

    function retry(cardId, title) {
      var name = title ? "“" + title + "”" : cardId + " (deleted card)";
      var fromDetail = document.activeElement && document.activeElement.getAttribute("data-testid") === "detail-retry";
      setFeedback(els.pendingFeedback, "info", "Retrying " + name + "…");
      document.querySelectorAll('[data-testid="pending-retry"], [data-testid="detail-retry"]').forEach(function (b) { b.disabled = true; });
      api("POST", wsBase() + "/" + encodeURIComponent(cardId) + "/retry").then(function () {
        setFeedback(els.pendingFeedback, "saved", "Index updated for " + name + ".");
        // the save's warning about this card is resolved now
        if (els.feedback.getAttribute("data-status") === "incomplete" && els.feedback.getAttribute("data-card") === cardId) {
          setFeedback(els.feedback, "saved", "Index updated for " + name + ".",
            title ? "Recall uses the current content." : "Recall no longer returns it.");
        }
      }, function (err) {
        var index = err.details && err.details.index;  // 503: the work is still pending
        if (index) {
          setFeedback(els.pendingFeedback, "incomplete", "Index update still incomplete for " + name + ".",
            index.error ? "Index error: " + index.error : "");
        } else {
          setFeedback(els.pendingFeedback, "error", "Retry failed for " + name + ".", err.message);
        }
      }).then(function () {
        loadPending().then(function () {
          if (fromDetail && state.mode === "detail") { $("detail-title").focus(); return; }
          var next = els.pendingList.querySelector("button");
          if (next) next.focus(); else $("pending-refresh").focus();
        });
        loadList();
      });
    }

    $("pending-refresh").addEventListener("click", function () { loadPending(); });

    // ---- start ----

    var initial = readUrl();
    updateFilterSummary();
    if (activeFilterCount()) $("filter-details").open = true;
    var options = Array.prototype.map.call(els.workspace.options, function (o) { return o.value; }).filter(Boolean);
    // the URL's workspace, else one chosen before this script ran (or restored by the browser)
    var chosen = options.indexOf(initial.workspace) >= 0 ? initial.workspace
      : options.indexOf(els.workspace.value) >= 0 ? els.workspace.value : "";
    els.workspace.value = chosen;
    if (chosen) chooseWorkspace(chosen, initial.card);
    if (chosen) startDraft(new URLSearchParams(window.location.search));
  }

  // --- boot ---------------------------------------------------------------------------

  function boot() {
    initLogout();
    var page = document.querySelector("[data-page]");
    var name = page ? page.getAttribute("data-page") : "";
    if (name === "login") initLogin();
    if (name === "memory") initMemory();
    if (page) page.setAttribute("data-ready", "true");  // behaviour attached (tests wait for it)
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", boot);
  else boot();
})();
