/* Administration → Accounts: workspaces, users, roles, memberships, token rotation,
 * deletion and the audit log, through /api/admin.
 *
 * Plain JavaScript, no build step. Data reaches the page through textContent only.
 * Unsafe requests carry the session's CSRF token, like app.js.
 */
(function () {
  "use strict";

  var ROLES = ["admin", "user", "agent"];
  var state = { workspaces: [], users: [] };

  function $(id) { return document.getElementById(id); }

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
        if (response.status === 401) window.location.assign("/login?next=/admin/accounts");
        if (!response.ok) {
          var error = (data && data.error) || {};
          throw { status: response.status, code: error.code || "http_" + response.status,
                  message: error.message || "The server answered " + response.status };
        }
        return data;
      });
    }, function (err) {
      throw { status: 0, code: "network_error", message: "The server cannot be reached (" + err.message + ")." };
    });
  }

  var h = window.ThothDom.h;  // static/dom.js
  var clear = window.ThothDom.clear;

  function pad(n) { return n < 10 ? "0" + n : String(n); }

  function day(iso) {
    var date = new Date(iso);
    if (isNaN(date.getTime())) return iso;
    return date.getFullYear() + "-" + pad(date.getMonth() + 1) + "-" + pad(date.getDate());
  }

  function moment(iso) {
    var date = new Date(iso);
    if (isNaN(date.getTime())) return iso;
    return day(iso) + " " + pad(date.getHours()) + ":" + pad(date.getMinutes());
  }

  function timeEl(iso, text) { return h("time", { datetime: iso, text: text }); }

  function say(kind, message) {
    var box = $("accounts-feedback");
    box.className = "feedback " + kind;
    box.textContent = message;
    box.hidden = false;
  }

  function failed(error) { say("error", error.message); }

  function me() { return document.querySelector("[data-me]").getAttribute("data-me"); }

  // --- workspaces ---------------------------------------------------------------------

  function renderWorkspaces() {
    var body = $("admin-workspaces");
    clear(body);
    state.workspaces.forEach(function (w) {
      body.appendChild(h("tr", { "data-workspace": w.id },
        h("td", { "data-label": "ID" }, h("code", { text: w.id })),
        h("td", { "data-label": "Name", text: w.name }),
        h("td", { "data-label": "Language", text: w.language === "it" ? "Italian" : "English" }),
        h("td", { "data-label": "Created" }, timeEl(w.created_at, day(w.created_at)))));
    });
    var boxes = $("user-workspaces");
    Array.prototype.slice.call(boxes.querySelectorAll("label")).forEach(function (l) { boxes.removeChild(l); });
    state.workspaces.forEach(function (w) {
      boxes.appendChild(h("label", { class: "check" },
        h("input", { type: "checkbox", name: "workspaces", value: w.id }), w.name + " (" + w.id + ")"));
    });
  }

  // --- users --------------------------------------------------------------------------

  function roleCell(user) {
    var select = h("select", { "aria-label": "Role of " + user.user, "data-testid": "role-select" });
    ROLES.forEach(function (role) {
      var option = h("option", { value: role, text: role });
      if (role === user.role) option.selected = true;
      select.appendChild(option);
    });
    select.addEventListener("change", function () {
      var wanted = select.value;
      select.disabled = true;
      api("PUT", "/api/admin/users/" + encodeURIComponent(user.user) + "/role", { role: wanted })
        .then(function () { say("saved", user.user + " is now " + wanted + "."); return reload(); })
        .catch(function (error) { select.value = user.role; select.disabled = false; failed(error); });
    });
    return select;
  }

  function membershipCell(user) {
    var chips = h("ul", { class: "chips small", "aria-label": "Workspaces of " + user.user });
    // the server lists only the memberships this admin administers: each may be revoked
    user.workspaces.forEach(function (id) {
      var chip = h("li", { class: "chip", "data-testid": "membership" }, id);
      var remove = h("button", { type: "button", class: "chip-remove", "data-testid": "revoke",
                                 "aria-label": "Revoke " + user.user + " from " + id, title: "Revoke", text: "×" });
      remove.addEventListener("click", function () {
        remove.disabled = true;
        api("DELETE", "/api/admin/users/" + encodeURIComponent(user.user) + "/workspaces/" + encodeURIComponent(id))
          .then(function () { say("saved", user.user + " no longer belongs to " + id + "."); return reload(); })
          .catch(function (error) { remove.disabled = false; failed(error); });
      });
      chip.appendChild(remove);
      chips.appendChild(chip);
    });
    if (user.other_workspaces) {
      chips.appendChild(h("li", { class: "muted small",
        text: "+" + user.other_workspaces + " not yours" }));
    }
    var cell = h("div", { class: "membership-cell" }, chips);
    var missing = state.workspaces.filter(function (w) { return user.workspaces.indexOf(w.id) < 0; });
    if (missing.length) {
      var select = h("select", { "aria-label": "Workspace to grant " + user.user, "data-testid": "grant-select" });
      missing.forEach(function (w) { select.appendChild(h("option", { value: w.id, text: w.id })); });
      var grant = h("button", { type: "button", class: "button secondary small", "data-testid": "grant", text: "Grant" });
      grant.addEventListener("click", function () {
        grant.disabled = true;
        api("PUT", "/api/admin/users/" + encodeURIComponent(user.user) + "/workspaces/" + encodeURIComponent(select.value))
          .then(function () { say("saved", user.user + " now belongs to " + select.value + "."); return reload(); })
          .catch(function (error) { grant.disabled = false; failed(error); });
      });
      cell.appendChild(h("div", { class: "inline grant" }, select, grant));
    }
    return cell;
  }

  function actionsCell(user) {
    var rotate = h("button", { type: "button", class: "button secondary small", "data-testid": "rotate-token" },
      "Rotate token", h("span", { class: "visually-hidden", text: " of " + user.user }));
    rotate.addEventListener("click", function () {
      rotate.disabled = true;
      api("POST", "/api/admin/users/" + encodeURIComponent(user.user) + "/token")
        .then(function (issued) {
          showToken(issued);
          say("saved", "The old token of " + user.user + " no longer works.");
          if (issued.user === me()) return;  // the own sessions closed with the old token
          return reload();
        })
        .catch(function (error) { rotate.disabled = false; failed(error); });
    });
    var remove = h("button", { type: "button", class: "button danger small", "data-testid": "delete-user" },
      "Delete", h("span", { class: "visually-hidden", text: " " + user.user }));
    var cell = h("div", { class: "actions" }, rotate, remove);
    remove.addEventListener("click", function () {
      var confirm = h("button", { type: "button", class: "button danger small confirm-delete", "data-testid": "confirm-delete",
                                  text: "Delete " + user.user + " for good" });
      var cancel = h("button", { type: "button", class: "button secondary small", text: "Cancel" });
      remove.hidden = true;
      cell.appendChild(confirm);
      cell.appendChild(cancel);
      confirm.focus();
      cancel.addEventListener("click", function () {
        cell.removeChild(confirm); cell.removeChild(cancel); remove.hidden = false; remove.focus();
      });
      confirm.addEventListener("click", function () {
        confirm.disabled = true;
        api("DELETE", "/api/admin/users/" + encodeURIComponent(user.user))
          .then(function () { say("saved", user.user + " was deleted."); return reload(); })
          .catch(function (error) {
            failed(error);
            cell.removeChild(confirm); cell.removeChild(cancel); remove.hidden = false;
          });
      });
    });
    return cell;
  }

  function renderUsers() {
    var body = $("admin-users");
    clear(body);
    state.users.forEach(function (user) {
      // the server refuses changes to a user who also belongs to workspaces this admin
      // does not administer: the page does not offer them
      var mine = user.other_workspaces === 0;
      var name = h("div", { class: "user-name" }, h("strong", { text: user.user }));
      if (user.user === me()) name.appendChild(h("span", { class: "badge", text: "you" }));
      var expiry = user.token_expires_at
        ? timeEl(user.token_expires_at, day(user.token_expires_at))
        : h("span", { class: "muted", text: user.token_issued_at ? "never" : "no token" });
      body.appendChild(h("tr", { "data-testid": "user-row", "data-user": user.user },
        h("td", { "data-label": "User" }, name),
        h("td", { "data-label": "Role" }, mine ? roleCell(user) : h("span", { text: user.role })),
        h("td", { "data-label": "Workspaces" }, membershipCell(user)),
        h("td", { "data-label": "Token expires" }, expiry),
        h("td", { "data-label": "Actions" }, mine ? actionsCell(user)
          : h("span", { class: "muted small", text: "Also in workspaces you do not administer" }))));
    });
  }

  function showToken(issued) {
    var panel = $("new-token");
    panel.querySelector('[data-role="user"]').textContent = issued.user;
    panel.querySelector('[data-role="expiry"]').textContent = issued.token_expires_at
      ? "It expires on " + day(issued.token_expires_at) + "." : "It never expires.";
    $("new-token-value").value = issued.token;
    panel.hidden = false;
    $("new-token-value").focus();
    $("new-token-value").select();
  }

  // --- audit --------------------------------------------------------------------------

  function loadAudit() {
    return api("GET", "/api/admin/audit?limit=50").then(function (data) {
      var body = $("audit-rows");
      clear(body);
      data.items.forEach(function (e) {
        body.appendChild(h("tr", { "data-testid": "audit-row", "data-action": e.action },
          h("td", { "data-label": "When" }, timeEl(e.at, moment(e.at))),
          h("td", { "data-label": "Actor", text: e.actor || "—" }),
          h("td", { "data-label": "Action" }, h("code", { text: e.action })),
          h("td", { "data-label": "User", text: e.user || "" }),
          h("td", { "data-label": "Workspace", text: e.workspace || "" })));
      });
    });
  }

  // --- forms --------------------------------------------------------------------------

  function initForms() {
    $("workspace-form").addEventListener("submit", function (event) {
      event.preventDefault();
      var form = event.target;
      var id = form.elements.id;
      id.setAttribute("aria-invalid", String(!id.checkValidity()));
      if (!id.checkValidity()) { say("error", "A workspace id has lowercase letters, digits, - and _."); id.focus(); return; }
      var body = { id: id.value, language: form.elements.language.value };
      if (form.elements.name.value.trim()) body.name = form.elements.name.value.trim();
      api("POST", "/api/admin/workspaces", body)
        .then(function (created) { form.reset(); say("saved", "Workspace " + created.id + " created."); return reload(); })
        .catch(failed);
    });
    $("user-form").addEventListener("submit", function (event) {
      event.preventDefault();
      var form = event.target;
      var name = form.elements.name;
      var chosen = Array.prototype.slice.call(form.querySelectorAll('input[name="workspaces"]:checked'))
        .map(function (box) { return box.value; });
      name.setAttribute("aria-invalid", String(!name.checkValidity()));
      if (!name.checkValidity()) { say("error", "A user name has 1 to 64 letters, digits, ., _, @ or -."); name.focus(); return; }
      if (!chosen.length) { say("error", "Choose at least one workspace for the user."); return; }
      var body = { name: name.value, role: form.elements.role.value, workspaces: chosen };
      if (form.elements.expires_in.value) body.expires_in = form.elements.expires_in.value;
      if (form.elements.password.value) body.password = form.elements.password.value;
      api("POST", "/api/admin/users", body)
        .then(function (created) {
          form.reset();
          showToken(created);
          say("saved", "User " + created.user + " created.");
          return reload();
        })
        .catch(failed);
    });
    $("new-token-done").addEventListener("click", function () {
      $("new-token-value").value = "";
      $("new-token").hidden = true;
    });
    $("audit-refresh").addEventListener("click", function () { loadAudit().catch(failed); });
  }

  function reload() {
    return Promise.all([api("GET", "/api/admin/workspaces"), api("GET", "/api/admin/users")])
      .then(function (answers) {
        state.workspaces = answers[0].items;
        state.users = answers[1].items;
        renderWorkspaces();
        renderUsers();
        return loadAudit();
      });
  }

  function init() {
    var page = document.querySelector('[data-page="accounts"]');
    if (!page || !$("admin-users")) return;
    initForms();
    reload().then(function () {
      document.querySelectorAll('[data-page="accounts"] button[disabled]').forEach(function (b) { b.disabled = false; });
      page.setAttribute("data-ready", "true");
    }, failed);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
}());
