/* Starts Swagger UI on the OpenAPI document (a file, not inline: the pages' CSP allows
 * only scripts of this origin). Requests made with "Try it out" are same-origin, so the
 * page's session cookie authenticates them; API clients use "Authorize" with a token. */
(function () {
  "use strict";
  var root = document.getElementById("swagger-ui");
  window.addEventListener("DOMContentLoaded", function () {
    window.ui = window.SwaggerUIBundle({
      url: root.getAttribute("data-openapi-url"),
      dom_id: "#swagger-ui",
      deepLinking: true,
      presets: [window.SwaggerUIBundle.presets.apis],
      layout: "BaseLayout"
    });
  });
})();
