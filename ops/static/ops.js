// Live refresh of the operator pages: every data-refresh milliseconds, fetch
// the page again and swap in its <main>. The pages work the same without it.
(function () {
  "use strict";
  var main = document.getElementById("content");
  if (!main || !window.fetch || !window.DOMParser) return;
  var period = parseInt(main.getAttribute("data-refresh"), 10);
  if (!(period > 0)) return;
  var live = main.querySelector(".live");
  if (live) live.hidden = false;
  var busy = false;
  function refresh() {
    if (busy || document.hidden) return;
    // Keep what the operator is doing: no swap while a control has focus
    // or a details element was opened.
    var active = document.activeElement;
    if (active && active !== document.body && main.contains(active)) return;
    if (main.querySelector("details[open]")) return;
    busy = true;
    fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" }, redirect: "manual" })
      .then(function (r) {
        if (r.type === "opaqueredirect" || !r.ok) throw new Error("refresh stopped: " + r.status);
        return r.text();
      })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var next = doc.getElementById("content");
        if (!next) return;
        main.innerHTML = next.innerHTML;
        var l = main.querySelector(".live");
        if (l) l.hidden = false;
      })
      .catch(function () { clearInterval(timer); if (live) live.hidden = true; })
      .then(function () { busy = false; });
  }
  var timer = setInterval(refresh, period);
})();
