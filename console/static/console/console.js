/* Context Console — small progressive enhancements. Every page works without this file.
 *
 *  - copy buttons:       <button class="copy-btn" data-copy="VALUE">  (see _components/copy.html)
 *  - "/" shortcut:       focuses #request-search from anywhere (not while typing in a field)
 *  - local times:        <time datetime="ISO">  text rewritten to the browser's local time;
 *                        the title attribute keeps the UTC value
 *  - dismiss banners:    <button data-dismiss>   removes the closest .banner
 *  - close a <details>:  <button data-close-details> closes the closest <details>
 *  - demo logins:        <button data-demo-login data-username data-password> fills the login form
 *
 * Uses event delegation and htmx:load, so content swapped in by htmx is handled too.
 * CSRF for htmx is set by hx-headers on <body>; nothing to configure here.
 */
(function () {
  "use strict";

  /* ---------------------------------------------------------------- local time */
  function pad(n) {
    return String(n).padStart(2, "0");
  }

  var zoneName = (function () {
    try {
      var parts = new Intl.DateTimeFormat(undefined, { timeZoneName: "short" }).formatToParts(new Date());
      for (var i = 0; i < parts.length; i++) {
        if (parts[i].type === "timeZoneName") return parts[i].value;
      }
    } catch (e) {
      /* old browser: fall through */
    }
    return "";
  })();

  function formatLocal(date, withSeconds) {
    var text =
      date.getFullYear() + "-" + pad(date.getMonth() + 1) + "-" + pad(date.getDate()) +
      " " + pad(date.getHours()) + ":" + pad(date.getMinutes()) +
      (withSeconds ? ":" + pad(date.getSeconds()) : "");
    return zoneName ? text + " " + zoneName : text;
  }

  function localizeTimes(root) {
    var scope = root && root.querySelectorAll ? root : document;
    var nodes = scope.querySelectorAll("time[datetime]");
    if (scope.matches && scope.matches("time[datetime]")) nodes = [scope].concat(Array.from(nodes));
    Array.prototype.forEach.call(nodes, function (el) {
      if (el.hasAttribute("data-no-localize")) return;
      var iso = el.getAttribute("datetime");
      // Only full timestamps: a bare date ("2025-11-30") has no time zone to convert.
      if (!iso || iso.indexOf("T") === -1) return;
      var date = new Date(iso);
      if (isNaN(date.getTime())) return;
      if (!el.title) {
        el.title = date.toISOString().replace("T", " ").slice(0, 19) + " UTC";
      }
      el.textContent = formatLocal(date, el.hasAttribute("data-seconds"));
      el.setAttribute("data-localized", "");
    });
  }

  /* ---------------------------------------------------------------- copy */
  function fallbackCopy(text) {
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.top = "-1000px";
    document.body.appendChild(area);
    area.select();
    var ok = false;
    try {
      ok = document.execCommand("copy");
    } catch (e) {
      ok = false;
    }
    document.body.removeChild(area);
    return ok ? Promise.resolve() : Promise.reject(new Error("copy failed"));
  }

  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text).catch(function () {
        return fallbackCopy(text);
      });
    }
    return fallbackCopy(text);
  }

  function flashButton(btn, ok) {
    if (!btn.hasAttribute("data-original-label")) {
      btn.setAttribute("data-original-label", btn.textContent);
    }
    clearTimeout(btn._ccTimer);
    btn.textContent = ok ? "Copied" : "Press Ctrl+C";
    btn.classList.toggle("is-copied", ok);
    btn.classList.toggle("is-failed", !ok);
    var live = document.getElementById("cc-live");
    if (live) live.textContent = ok ? "Copied to clipboard" : "Could not copy";
    btn._ccTimer = setTimeout(function () {
      btn.textContent = btn.getAttribute("data-original-label");
      btn.classList.remove("is-copied", "is-failed");
    }, 1500);
  }

  function selectValueOf(btn) {
    var holder = btn.closest(".copy");
    var value = holder && holder.querySelector(".copy-value");
    if (!value) return;
    var range = document.createRange();
    range.selectNodeContents(value);
    var sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
  }

  /* ---------------------------------------------------------------- clicks (delegated) */
  document.addEventListener("click", function (event) {
    var target = event.target;
    if (!(target instanceof Element)) return;

    var copyBtn = target.closest("[data-copy]");
    if (copyBtn) {
      event.preventDefault();
      copyText(copyBtn.getAttribute("data-copy")).then(
        function () {
          flashButton(copyBtn, true);
        },
        function () {
          selectValueOf(copyBtn);
          flashButton(copyBtn, false);
        }
      );
      return;
    }

    var dismiss = target.closest("[data-dismiss]");
    if (dismiss) {
      var banner = dismiss.closest(".banner");
      if (banner) banner.remove();
      return;
    }

    var closer = target.closest("[data-close-details]");
    if (closer) {
      var details = closer.closest("details");
      if (details) {
        details.open = false;
        var summary = details.querySelector("summary");
        if (summary) summary.focus();
      }
      return;
    }

    var demo = target.closest("[data-demo-login]");
    if (demo) {
      var form = document.querySelector("form.login-form") || document;
      var user = form.querySelector("input[name='username']");
      var pass = form.querySelector("input[name='password']");
      if (user) user.value = demo.getAttribute("data-username") || "";
      if (pass) pass.value = demo.getAttribute("data-password") || "";
      var submit = form.querySelector("[type='submit']");
      if (submit) submit.focus();
    }
  });

  /* Escape closes an open confirm panel (<details class="confirm">). */
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape") return;
    var open = document.querySelector("details.confirm[open]");
    if (open && open.contains(document.activeElement)) {
      open.open = false;
      var summary = open.querySelector("summary");
      if (summary) summary.focus();
    }
  });

  /* ---------------------------------------------------------------- "/" focuses the request_id search */
  function isTyping(el) {
    if (!el) return false;
    if (el.isContentEditable) return true;
    var tag = el.tagName;
    return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT";
  }

  document.addEventListener("keydown", function (event) {
    if (event.key !== "/" || event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.defaultPrevented || isTyping(document.activeElement)) return;
    var search = document.getElementById("request-search");
    if (!search) return;
    event.preventDefault();
    search.focus();
    search.select();
  });

  /* Escape leaves the search box. */
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && document.activeElement && document.activeElement.id === "request-search") {
      document.activeElement.blur();
    }
  });

  /* ---------------------------------------------------------------- boot */
  function boot() {
    localizeTimes(document);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", boot);
  } else {
    boot();
  }

  // htmx fires htmx:load for every element it swaps in.
  document.addEventListener("htmx:load", function (event) {
    localizeTimes(event.target);
  });

  window.ContextConsole = { localizeTimes: localizeTimes, copyText: copyText };
})();
