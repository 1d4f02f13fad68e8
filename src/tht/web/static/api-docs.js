/* Starts Swagger UI on the OpenAPI document (a file, not inline: the pages' CSP allows
 * only scripts of this origin). "Try it out" works two ways:
 * - logged in to the pages: the session cookie goes along, and writes get the session's
 *   CSRF token, as the pages send it;
 * - with an API token: "Authorize" (a bearer scheme added here, for this page only). */
(function () {
  "use strict";
  var root = document.getElementById("swagger-ui");

  function json(url) {
    return fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; }, function () { return null; });
  }

  window.addEventListener("DOMContentLoaded", function () {
    Promise.all([json(root.getAttribute("data-openapi-url")), json("/api/session")]).then(function (found) {
      var spec = found[0];
      var csrf = found[1] && found[1].csrf_token;
      spec.components = spec.components || {};
      spec.components.securitySchemes = { token: { type: "http", scheme: "bearer",
        description: "An API token: `tht user create` prints one, `tht serve` writes the admin's to $THT_HOME/admin-token." } };
      spec.security = [{ token: [] }, {}];
      window.ui = window.SwaggerUIBundle({
        spec: spec,
        dom_id: "#swagger-ui",
        deepLinking: true,
        presets: [window.SwaggerUIBundle.presets.apis],
        layout: "BaseLayout",
        requestInterceptor: function (request) {
          if (csrf && request.method && request.method.toUpperCase() !== "GET") request.headers["X-CSRF-Token"] = csrf;
          return request;
        }
      });
      root.setAttribute("data-ready", "true");
    });
  });
})();
