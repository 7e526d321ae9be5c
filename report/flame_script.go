package report

import "html/template"

// flameScript is the page's one script, there only when it has flame
// graphs: it lays each graph out again at the width of the page, says
// under it the name and share of the box the pointer rests on (its
// tooltip's text), and zooms into a box on a click: the box spans the
// graph, its callees above it in proportion, its callers below it across
// the whole width and faded, everything else hidden. A click on the root
// or on a faded caller, the "Zoom out" button or Esc zooms back out. Labels
// are fitted to their boxes as flameLabel fits them, with the width of a
// character measured in the page's own font. It needs nothing but the
// page, and reads only what the SVG says of each box: data-from and
// data-samples (samples before the box at its level and its own, of the
// graph's data-samples) and data-depth (its level, the root 0).
const flameScript template.JS = `(function () {
  "use strict";
  var HINT = "Point at a box for its name and share; click it to zoom in; click the bottom box, press Esc or Zoom out to see all.";
  var graphs = [];

  function fit(label, width, charWidth) {
    var fits = Math.floor((width - 6) / charWidth);
    if (fits < 3) return "";
    var chars = Array.from(label);
    return chars.length > fits ? chars.slice(0, fits - 1).join("") + "\u2026" : label;
  }

  function Graph(svg) {
    var self = this;
    this.svg = svg;
    this.samples = +svg.getAttribute("data-samples");
    this.height = +svg.getAttribute("height");
    this.zoomed = null;
    this.frames = Array.prototype.map.call(svg.querySelectorAll("g.frame"), function (g) {
      var rect = g.querySelector("rect"), text = g.querySelector("text"), title = rect.querySelector("title");
      var f = {
        g: g, rect: rect, text: text,
        from: +g.getAttribute("data-from"), samples: +g.getAttribute("data-samples"), depth: +g.getAttribute("data-depth"),
        label: text.getAttribute("data-label") || "", info: title ? title.textContent : ""
      };
      g.flameFrame = f;
      return f;
    });
    var bar = document.createElement("p");
    bar.className = "flame-bar";
    this.reset = document.createElement("button");
    this.reset.type = "button";
    this.reset.className = "flame-reset";
    this.reset.textContent = "Zoom out";
    this.reset.hidden = true;
    this.details = document.createElement("span");
    this.details.className = "flame-details";
    this.details.textContent = HINT;
    bar.appendChild(this.reset);
    bar.appendChild(document.createTextNode(" "));
    bar.appendChild(this.details);
    svg.parentNode.insertBefore(bar, svg.nextSibling);

    this.reset.addEventListener("click", function () { self.zoom(null); });
    svg.addEventListener("mouseover", function (e) {
      var f = self.frameOf(e.target);
      if (f) self.details.textContent = f.info;
    });
    svg.addEventListener("mouseout", function (e) {
      if (self.frameOf(e.target)) self.details.textContent = HINT;
    });
    svg.addEventListener("click", function (e) {
      var f = self.frameOf(e.target);
      if (f) self.zoom(f.depth === 0 ? null : f);
    });
  }

  Graph.prototype.frameOf = function (el) {
    for (; el && el !== this.svg; el = el.parentNode) {
      if (el.flameFrame) return el.flameFrame;
    }
    return null;
  };

  // charWidth is the mean width of a character of a label, as drawn.
  Graph.prototype.charWidth = function () {
    if (this.measured) return this.measured;
    var probe = document.createElementNS("http://www.w3.org/2000/svg", "text");
    probe.setAttribute("class", "frame");
    probe.textContent = "runtime.mallocgc tcp_sendmsg json.Marshal (*conn).serve";
    this.svg.appendChild(probe);
    var width = probe.getComputedTextLength() / probe.textContent.length;
    this.svg.removeChild(probe);
    this.measured = width > 2 ? width : 7;
    return this.measured;
  };

  Graph.prototype.zoom = function (f) {
    this.zoomed = f;
    this.reset.hidden = !f;
    this.layout();
  };

  Graph.prototype.layout = function () {
    var width = Math.max(200, Math.floor(this.svg.parentNode.clientWidth));
    this.svg.setAttribute("width", width);
    this.svg.setAttribute("viewBox", "0 0 " + width + " " + this.height);
    var z = this.zoomed;
    var from = z ? z.from : 0, samples = z ? z.samples : this.samples, depth = z ? z.depth : 0;
    var charWidth = this.charWidth();
    this.frames.forEach(function (f) {
      var within = f.depth >= depth && f.from >= from && f.from + f.samples <= from + samples;
      var caller = f.depth < depth && f.from <= from && f.from + f.samples >= from + samples;
      var x = 0, w = width;
      if (within) {
        x = (f.from - from) / samples * width;
        w = f.samples / samples * width;
      }
      if ((!within && !caller) || w < 0.1) {
        f.g.style.display = "none";
        return;
      }
      f.g.style.display = "";
      f.g.classList.toggle("caller", caller);
      f.rect.setAttribute("x", x.toFixed(1));
      f.rect.setAttribute("width", Math.max(w - 0.5, 0.1).toFixed(1));
      f.text.setAttribute("x", (x + 3).toFixed(1));
      f.text.textContent = fit(f.label, w, charWidth);
    });
  };

  Array.prototype.forEach.call(document.querySelectorAll("svg.flame"), function (svg) {
    var g = new Graph(svg);
    graphs.push(g);
    g.layout();
  });
  var pending = false;
  window.addEventListener("resize", function () {
    if (pending) return;
    pending = true;
    window.requestAnimationFrame(function () {
      pending = false;
      graphs.forEach(function (g) { g.layout(); });
    });
  });
  document.addEventListener("keydown", function (e) {
    if (e.key !== "Escape") return;
    graphs.forEach(function (g) { if (g.zoomed) g.zoom(null); });
  });
})();
`
