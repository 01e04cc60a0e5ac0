/// The dashboard's one stylesheet and one script, served same-origin from constants (`/assets/app.css`,
/// `/assets/app.js`): nothing is fetched from the network, so the pages work offline, and the CSP can say
/// `script-src 'self'; style-src 'self'` (no inline script or style anywhere: docs/web.md "Security").
///
/// Invariant: neither constant holds anything from a request or from Redis; the script reads data only from
/// `/api/stats.json` (numbers) and from the pages' attributes (`data-confirm`, `data-select-all`), and writes text
/// with `textContent`, never markup.
enum Assets {
    static let css = """
        :root{--bg:#ffffff;--fg:#1d2330;--muted:#5f6b7d;--line:#d9dee7;--head:#f2f4f8;--card:#f7f8fb;--accent:#2458c6;
        --processed:#4f79b7;--failed:#d0453a;--code:#f4f6f9;--button:#ffffff;--danger:#b3261e}
        @media (prefers-color-scheme:dark){:root{--bg:#11151c;--fg:#e3e7ee;--muted:#9aa4b5;--line:#2c3441;--head:#1a2029;
        --card:#171c24;--accent:#8fb0ff;--processed:#7fa3d9;--failed:#f07167;--code:#181d26;--button:#202733;--danger:#ff8a80}}
        html{color-scheme:light dark}
        *{box-sizing:border-box}
        body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;background:var(--bg);color:var(--fg);
        overflow-wrap:anywhere}
        a{color:var(--accent);text-decoration:none}a:hover{text-decoration:underline}
        header{background:var(--head);border-bottom:1px solid var(--line);padding:.5rem 1rem}
        header nav{display:flex;flex-wrap:wrap;gap:.2rem .9rem;align-items:center}
        header .brand{font-weight:600;color:var(--fg);margin-right:.5rem}
        header form{display:flex;gap:.3rem;margin-left:auto}
        header input{width:12rem;max-width:45vw}
        main{padding:.5rem 1rem 2rem;max-width:1400px}
        h1{font-size:1.35rem;margin:.6rem 0}h2{font-size:1.1rem;margin:1.4rem 0 .4rem}h3{font-size:1rem;margin:1rem 0 .3rem}
        .muted{color:var(--muted)}.num{font-variant-numeric:tabular-nums;text-align:right}
        .scroll{overflow-x:auto;max-width:100%;-webkit-overflow-scrolling:touch}
        table{border-collapse:collapse;margin:.3rem 0;font-size:.92rem}
        td,th{border-bottom:1px solid var(--line);padding:.3rem .55rem;text-align:left;vertical-align:top;overflow-wrap:normal}
        th{background:var(--head);font-weight:600;white-space:nowrap}
        tr:hover td{background:var(--card)}
        td code{display:inline-block;min-width:6rem;max-width:32rem;overflow-wrap:anywhere}
        td .muted{white-space:nowrap}
        pre{background:var(--code);border:1px solid var(--line);border-radius:4px;padding:.6rem;overflow:auto;max-width:100%;
        white-space:pre;font-size:.85rem}
        input,button,select{font:inherit;color:var(--fg);background:var(--button);border:1px solid var(--line);border-radius:4px;
        padding:.15rem .5rem}
        button{cursor:pointer;white-space:nowrap}button:hover{border-color:var(--accent)}
        button[data-action=delete],button[data-action=kill],button[data-action=clear],button[data-action=stop]{color:var(--danger)}
        form.inline{display:inline;margin:0 .15rem}
        form.filters{display:flex;flex-wrap:wrap;gap:.3rem;margin:.3rem 0}
        .bulk{display:flex;flex-wrap:wrap;gap:.3rem;align-items:center;margin:.4rem 0}
        .cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(8.5rem,1fr));gap:.5rem;margin:.5rem 0}
        .card{display:block;background:var(--card);border:1px solid var(--line);border-radius:6px;padding:.45rem .7rem;color:var(--fg)}
        .card .num{display:block;font-size:1.35rem;font-weight:600;text-align:left}
        .card .label{color:var(--muted);font-size:.85rem}
        svg.chart{max-width:100%;height:auto;display:block}
        svg.chart text{fill:var(--muted);font-size:10px;font-family:inherit}
        svg.chart .grid{stroke:var(--line);stroke-width:1}
        svg.chart .axis{stroke:var(--muted);stroke-width:1}
        svg.chart .processed{fill:var(--processed)}svg.chart .failed{fill:var(--failed)}
        svg.chart .hit{fill:transparent}svg.chart .hit:hover{fill:var(--line);fill-opacity:.35}
        .state{display:inline-block;border:1px solid var(--line);border-radius:999px;padding:0 .6rem;background:var(--card)}
        dl.fields{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem;margin:.4rem 0}
        dl.fields dt{color:var(--muted)}dl.fields dd{margin:0}
        section.shard{border-top:2px solid var(--line);margin-top:1rem}
        #live-status{font-size:.85rem}
        """

    /// The pages' one script (loaded with `defer` by every page; works without it except for the live view):
    /// - a form (or its submit button) with `data-confirm` asks first (the question is the attribute's text, never code);
    /// - a checkbox `data-select-all="FORM"` checks or unchecks every row checkbox of that bulk form;
    /// - on the dashboard (`#live`), polls `/api/stats.json` every 5 s and updates the counters (`data-stat`) and
    ///   the last-minutes chart (`#live-chart`), drawn with DOM calls and `textContent` only.
    static let js = """
        "use strict";
        document.addEventListener("submit", function (event) {
          var form = event.target, button = event.submitter;
          var question = (button && button.dataset && button.dataset.confirm) || (form && form.dataset && form.dataset.confirm);
          if (question && !window.confirm(question)) event.preventDefault();
        }, true);
        document.addEventListener("change", function (event) {
          var box = event.target;
          if (!box || !box.dataset || !box.dataset.selectAll) return;
          var rows = document.querySelectorAll("input[type=checkbox][name=jid][form='" + CSS.escape(box.dataset.selectAll) + "']");
          for (var i = 0; i < rows.length; i++) rows[i].checked = box.checked;
        });
        (function () {
          var live = document.getElementById("live");
          if (!live) return;
          var svgNS = "http://www.w3.org/2000/svg";
          function node(name, attributes, text) {
            var element = document.createElementNS(svgNS, name);
            for (var key in attributes) element.setAttribute(key, String(attributes[key]));
            if (text !== undefined) element.textContent = text;
            return element;
          }
          function niceMax(value) {
            if (value <= 4) return 4;
            var power = Math.pow(10, Math.floor(Math.log10(value))), steps = [1, 2, 2.5, 5, 10];
            for (var i = 0; i < steps.length; i++) if (steps[i] * power >= value) return steps[i] * power;
            return 10 * power;
          }
          function draw(minutes) {
            var chart = document.getElementById("live-chart");
            if (!chart) return;
            var left = 44, top = 22, height = 120, slot = 34, bar = 14;
            var width = left + minutes.length * slot + 8;
            var max = niceMax(Math.max.apply(null, [1].concat(minutes.map(function (m) { return Math.max(m.processed, m.failed); }))));
            while (chart.firstChild) chart.removeChild(chart.firstChild);
            chart.setAttribute("viewBox", "0 0 " + width + " " + (top + height + 24));
            chart.setAttribute("width", width);
            chart.setAttribute("height", top + height + 24);
            for (var t = 0; t <= 4; t++) {
              var y = top + height - t * height / 4;
              chart.appendChild(node("line", {"class": "grid", x1: left, x2: width - 4, y1: y, y2: y}));
              chart.appendChild(node("text", {x: left - 4, y: y + 3, "text-anchor": "end"}, String(Math.round(max * t / 4))));
            }
            chart.appendChild(node("line", {"class": "axis", x1: left, x2: left, y1: top, y2: top + height}));
            chart.appendChild(node("rect", {"class": "processed", x: left, y: 4, width: 10, height: 10}));
            chart.appendChild(node("text", {x: left + 14, y: 13}, "processed"));
            chart.appendChild(node("rect", {"class": "failed", x: left + 80, y: 4, width: 10, height: 10}));
            chart.appendChild(node("text", {x: left + 94, y: 13}, "failed"));
            chart.appendChild(node("text", {x: 4, y: 13}, "runs"));
            minutes.forEach(function (minute, index) {
              var x = left + 4 + index * slot;
              var label = new Date(minute.start * 1000).toISOString().substring(11, 16);
              var p = minute.processed * height / max, f = minute.failed * height / max;
              var hit = node("rect", {"class": "hit", x: x - 2, y: top, width: slot - 2, height: height});
              hit.appendChild(node("title", {}, label + " UTC: " + minute.processed + " processed, " + minute.failed + " failed"));
              chart.appendChild(hit);
              var pr = node("rect", {"class": "processed", x: x, y: top + height - p, width: bar, height: p});
              pr.appendChild(node("title", {}, label + " UTC: " + minute.processed + " processed"));
              chart.appendChild(pr);
              var fr = node("rect", {"class": "failed", x: x + bar, y: top + height - f, width: bar, height: f});
              fr.appendChild(node("title", {}, label + " UTC: " + minute.failed + " failed"));
              chart.appendChild(fr);
              if (index % 2 === 0) chart.appendChild(node("text", {x: x, y: top + height + 14}, label));
            });
          }
          function render(stats) {
            var fields = document.querySelectorAll("[data-stat]");
            for (var i = 0; i < fields.length; i++) {
              var value = stats[fields[i].dataset.stat];
              if (typeof value === "number") fields[i].textContent = String(value);
            }
            if (Array.isArray(stats.minutes)) draw(stats.minutes);
            var status = document.getElementById("live-status");
            if (status) status.textContent = "Updated " + new Date(stats.time * 1000).toISOString().substring(11, 19) + " UTC";
            live.dataset.updates = String(Number(live.dataset.updates || "0") + 1);
          }
          function poll() {
            fetch("/api/stats.json", {credentials: "same-origin", cache: "no-store"})
              .then(function (response) { if (!response.ok) throw new Error(String(response.status)); return response.json(); })
              .then(render)
              .catch(function (error) {
                var status = document.getElementById("live-status");
                if (status) status.textContent = "Live update failed (" + error.message + "); retrying";
              });
          }
          poll();
          setInterval(poll, 5000);
        })();
        """
}
