/* GuideLoom format explorer.
 *
 * Shows how two short documents become training samples in document mode (one sample per
 * document) and in stream mode (the documents joined, each ending in an explicit <eos>, then cut
 * into windows), and in chat mode (a ChatML conversation as ingestion writes it, tokens with
 * loss_mask 0 dimmed). Plain JavaScript, no dependencies, so the built docs work offline.
 *
 * The window arithmetic mirrors guideloom.StreamDataset: windows are complete, non-overlapping
 * runs of `sequenceLength` consecutive tokens of the joined stream; window k covers
 * [k * L, (k + 1) * L); only the final partial window is dropped.
 */
(function () {
  "use strict";

  var EOS = "<eos>";
  var DOCUMENTS = [
    { words: ["the", "cat", "sat", "on", "the", "mat"], concepts: ["animals", "home"] },
    { words: ["a", "dog", "chased", "the", "red", "ball"], concepts: ["animals", "play"] },
  ];
  var DEFAULT_WINDOW = 4;
  /* A conversation rendered with ChatML, one word per token; under train_on: assistant the
     assistant's content and its <|im_end|> have loss_mask 1, everything else 0. */
  var CHAT = [
    { role: "user", words: ["what", "is", "2+2?"] },
    { role: "assistant", words: ["4."] },
    { role: "user", words: ["and", "3+3?"] },
    { role: "assistant", words: ["6."] },
  ];
  var MODES = [["document", "Document mode"], ["stream", "Stream mode"], ["chat", "Chat (loss mask)"]];

  /* One entry per stream token: its text, the document it came from and its position. */
  function buildStream(documents) {
    var stream = [];
    documents.forEach(function (doc, d) {
      doc.words.concat([EOS]).forEach(function (word) {
        stream.push({ text: word, doc: d });
      });
    });
    return stream;
  }

  /* The chat stream: ChatML markers, roles and words, each with its loss_mask, then <eos>. */
  function buildChat(messages) {
    var stream = [];
    messages.forEach(function (m) {
      var trained = m.role === "assistant" ? 1 : 0;
      stream.push({ text: "<|im_start|>", doc: 0, mask: 0 });
      stream.push({ text: m.role, doc: 0, mask: 0 });
      m.words.forEach(function (word) { stream.push({ text: word, doc: 0, mask: trained }); });
      stream.push({ text: "<|im_end|>", doc: 0, mask: trained });
    });
    stream.push({ text: EOS, doc: 0, mask: 0 });
    return stream;
  }

  /* Half-open [start, stop) windows of the stream, and the dropped tail (or null). */
  function computeWindows(streamLength, sequenceLength) {
    if (!(sequenceLength >= 1)) {
      throw new RangeError("sequenceLength must be a positive integer");
    }
    var count = Math.floor(streamLength / sequenceLength);
    var windows = [];
    for (var k = 0; k < count; k++) {
      windows.push([k * sequenceLength, (k + 1) * sequenceLength]);
    }
    var end = count * sequenceLength;
    return { windows: windows, dropped: end < streamLength ? [end, streamLength] : null };
  }

  /* The documents a range of the stream touches, in order. */
  function documentsIn(stream, start, stop) {
    var docs = [];
    for (var i = start; i < stop; i++) {
      if (docs.indexOf(stream[i].doc) < 0) docs.push(stream[i].doc);
    }
    return docs;
  }

  function docName(d) { return String.fromCharCode(65 + d); }

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (key) {
      if (key === "text") node.textContent = attrs[key];
      else if (key === "className") node.className = attrs[key];
      else node.setAttribute(key, attrs[key]);
    });
    (children || []).forEach(function (child) { if (child) node.appendChild(child); });
    return node;
  }

  function Explorer(root) {
    this.root = root;
    this.streams = { stream: buildStream(DOCUMENTS), chat: buildChat(CHAT) };
    var initial = root.getAttribute("data-initial-mode");
    this.mode = initial === "document" || initial === "chat" ? initial : "stream";
    this.stream = this.mode === "chat" ? this.streams.chat : this.streams.stream;
    this.sequenceLength = DEFAULT_WINDOW;
    this.selected = null;  // index into the stream, or null
    this.uid = "gl-explorer-" + Explorer.count++;
    this.build();
    this.render();
  }
  Explorer.count = 0;

  Explorer.prototype.build = function () {
    var self = this;
    var uid = this.uid;
    this.root.textContent = "";
    this.root.classList.add("gl-explorer--ready");

    var modes = el("fieldset", { className: "gl-modes" }, [el("legend", { text: "Sample layout" })]);
    MODES.forEach(function (pair) {
      var id = uid + "-mode-" + pair[0];
      var input = el("input", { type: "radio", name: uid + "-mode", id: id, value: pair[0] });
      input.checked = pair[0] === self.mode;
      input.addEventListener("change", function () {
        if (input.checked) self.setMode(pair[0]);
      });
      modes.appendChild(el("span", { className: "gl-mode" }, [input, el("label", { "for": id, text: pair[1] })]));
    });

    var sliderId = uid + "-window";
    this.slider = el("input", {
      type: "range", id: sliderId, min: "1", max: String(Math.max(this.streams.stream.length, this.streams.chat.length)),
      step: "1", value: String(this.sequenceLength), className: "gl-window-input",
    });
    this.sliderValue = el("output", { "for": sliderId, className: "gl-window-value" });
    this.slider.addEventListener("input", function () {
      self.setSequenceLength(parseInt(self.slider.value, 10));
    });
    this.windowControl = el("div", { className: "gl-window-control" }, [
      el("label", { "for": sliderId, text: "Window size (sequence_length)" }),
      el("span", { className: "gl-window-row" }, [this.slider, this.sliderValue]),
    ]);

    var key = el("p", { className: "gl-key" }, [el("span", { text: "Colours: " })]);
    DOCUMENTS.forEach(function (doc, d) {
      key.appendChild(el("span", { className: "gl-key-doc gl-doc-" + d, text: "document " + docName(d) }));
    });
    this.summary = el("p", { className: "gl-summary" });
    this.samples = el("ol", { className: "gl-samples", "aria-label": "Training samples" });
    this.status = el("p", { className: "gl-status", role: "status", "aria-live": "polite" });

    this.root.appendChild(el("div", { className: "gl-controls" }, [modes, this.windowControl]));
    this.root.appendChild(key);
    this.root.appendChild(this.summary);
    this.root.appendChild(this.samples);
    this.root.appendChild(this.status);

    this.samples.addEventListener("keydown", function (event) {
      var target = event.target;
      if (!target.classList || !target.classList.contains("gl-token")) return;
      var step = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1 }[event.key];
      if (!step) return;
      var tokens = Array.prototype.slice.call(self.samples.querySelectorAll(".gl-token"));
      var next = tokens[tokens.indexOf(target) + step];
      if (next) {
        event.preventDefault();
        next.focus();
        next.click();
      }
    });
  };

  Explorer.prototype.setMode = function (mode) {
    var stream = mode === "chat" ? this.streams.chat : this.streams.stream;
    if (stream !== this.stream) {
      this.stream = stream;
      this.selected = null;
      this.sequenceLength = Math.min(this.sequenceLength, stream.length);
      this.slider.value = String(this.sequenceLength);
    }
    this.mode = mode;
    this.render();
  };

  Explorer.prototype.setSequenceLength = function (length) {
    var max = this.stream.length;
    this.sequenceLength = Math.max(1, Math.min(max, length | 0));
    this.slider.value = String(this.sequenceLength);
    this.render();
  };

  Explorer.prototype.select = function (index) {
    this.selected = index;
    this.render();
    var again = this.samples.querySelector('.gl-token[data-token-index="' + index + '"]');
    if (again) again.focus();
  };

  Explorer.prototype.tokenButton = function (index, text) {
    var self = this;
    var token = this.stream[index];
    var button = el("button", {
      type: "button",
      className: "gl-token gl-doc-" + token.doc + (token.text === EOS ? " gl-token--eos" : "") +
        (token.mask === 0 ? " gl-token--masked" : ""),
      "data-token-index": String(index),
      "data-doc": String(token.doc),
      "aria-pressed": this.selected === index ? "true" : "false",
      text: text,
    });
    if (token.mask !== undefined) button.setAttribute("data-loss-mask", String(token.mask));
    button.addEventListener("click", function () { self.select(index); });
    return button;
  };

  Explorer.prototype.conceptList = function (docs) {
    var list = el("span", { className: "gl-concepts" }, [el("span", { className: "gl-concepts-label", text: "concepts:" })]);
    docs.forEach(function (d) {
      DOCUMENTS[d].concepts.forEach(function (concept) {
        list.appendChild(el("span", { className: "gl-concept gl-doc-" + d, text: concept }));
      });
    });
    return list;
  };

  Explorer.prototype.render = function () {
    this.root.setAttribute("data-mode", this.mode);
    this.sliderValue.textContent = String(this.sequenceLength);
    this.slider.disabled = this.mode === "document";
    this.windowControl.classList.toggle("gl-disabled", this.mode === "document");
    this.samples.textContent = "";
    if (this.mode !== "document") this.renderStream();
    else this.renderDocuments();
  };

  Explorer.prototype.renderDocuments = function () {
    var self = this;
    var selectedDoc = this.selected === null ? null : this.stream[this.selected].doc;
    var offset = 0;
    DOCUMENTS.forEach(function (doc, d) {
      var tokens = el("span", { className: "gl-tokens" });
      doc.words.forEach(function (word, i) { tokens.appendChild(self.tokenButton(offset + i, word)); });
      offset += doc.words.length + 1;  // the stream's <eos> is not part of a document sample
      var item = el("li", {
        className: "gl-sample gl-sample--document" + (selectedDoc === d ? " is-selected" : ""),
        "data-sample-index": String(d),
      }, [
        el("span", { className: "gl-sample-label", text: "Sample " + d + " · document " + docName(d) }),
        tokens,
        self.conceptList([d]),
      ]);
      self.samples.appendChild(item);
    });
    this.summary.textContent = "Each sample is one whole document, as written. Samples differ in " +
      "length; GuideLoom does not join or pad them.";
    if (selectedDoc === null) {
      this.status.textContent = "Select a word to see the sample it belongs to.";
    } else {
      this.status.textContent = "“" + this.stream[this.selected].text + "” is in sample " + selectedDoc +
        ", the whole of document " + docName(selectedDoc) + " (" + DOCUMENTS[selectedDoc].words.length + " tokens).";
    }
  };

  Explorer.prototype.renderStream = function () {
    var self = this;
    var L = this.sequenceLength;
    var layout = computeWindows(this.stream.length, L);
    var selectedWindow = null;
    if (this.selected !== null) {
      selectedWindow = this.selected < layout.windows.length * L ? Math.floor(this.selected / L) : "dropped";
    }
    var groups = layout.windows.map(function (w, k) { return { range: w, index: k }; });
    if (layout.dropped) groups.push({ range: layout.dropped, index: "dropped" });

    groups.forEach(function (group) {
      var start = group.range[0];
      var stop = group.range[1];
      var dropped = group.index === "dropped";
      var docs = documentsIn(self.stream, start, stop);
      var crosses = docs.length > 1;
      var tokens = el("span", { className: "gl-tokens" });
      for (var i = start; i < stop; i++) tokens.appendChild(self.tokenButton(i, self.stream[i].text));
      var label = dropped ? "Dropped: partial window of " + (stop - start) + (stop - start === 1 ? " token" : " tokens")
        : "Window " + group.index + " · tokens " + start + "–" + (stop - 1);
      var badges = el("span", { className: "gl-badges" });
      if (crosses) badges.appendChild(el("span", { className: "gl-badge gl-badge--cross", text: "crosses a document boundary" }));
      if (dropped) badges.appendChild(el("span", { className: "gl-badge gl-badge--dropped", text: "not a sample" }));
      var attrs = {
        className: "gl-sample gl-sample--window" + (dropped ? " gl-sample--dropped" : "") +
          (crosses ? " gl-sample--crosses" : "") + (selectedWindow === group.index ? " is-selected" : ""),
        "data-window-start": String(start),
        "data-window-stop": String(stop),
        "data-crosses-boundary": crosses ? "true" : "false",
      };
      if (dropped) attrs["data-dropped"] = "true";
      else attrs["data-window-index"] = String(group.index);
      self.samples.appendChild(el("li", attrs, [
        el("span", { className: "gl-sample-label", text: label }), badges, tokens,
        self.mode === "chat" ? null : self.conceptList(docs),
      ]));
    });

    var n = this.stream.length;
    var kept = layout.windows.length * L;
    if (this.mode === "chat") {
      this.renderChatText(layout, n, kept, selectedWindow);
      return;
    }
    this.summary.textContent = "The two documents, each ending in <eos>, join into one stream of " + n +
      " tokens. With sequence_length = " + L + " that makes " + layout.windows.length +
      (layout.windows.length === 1 ? " window" : " windows") +
      (kept < n ? "; the last " + (n - kept) + (n - kept === 1 ? " token is" : " tokens are") + " dropped." : "; nothing is dropped.");

    if (this.selected === null) {
      this.status.textContent = "Select a token to highlight the window it falls in.";
    } else {
      var token = this.stream[this.selected];
      var what = "Token " + this.selected + " “" + token.text + "” (document " + docName(token.doc) + ")";
      if (selectedWindow === "dropped") {
        this.status.textContent = what + " is in the trailing partial window, which is dropped: no sample contains it.";
      } else {
        var w = layout.windows[selectedWindow];
        var cross = documentsIn(this.stream, w[0], w[1]).length > 1;
        this.status.textContent = what + " is in window " + selectedWindow + " (tokens " + w[0] + "–" + (w[1] - 1) + ")" +
          (cross ? ", which crosses a document boundary." : ".");
      }
    }
  };

  Explorer.prototype.renderChatText = function (layout, n, kept, selectedWindow) {
    var trained = this.stream.filter(function (t) { return t.mask === 1; }).length;
    this.summary.textContent = "A conversation rendered with ChatML becomes " + n + " tokens with a loss_mask " +
      "field (train_on: assistant): the " + trained + " tokens of the assistant's turns and their <|im_end|> are 1, " +
      "the rest, dimmed, are 0. With sequence_length = " + this.sequenceLength + " that makes " +
      layout.windows.length + (layout.windows.length === 1 ? " window" : " windows") +
      (kept < n ? "; the last " + (n - kept) + (n - kept === 1 ? " token is" : " tokens are") + " dropped." : ".");
    if (this.selected === null) {
      this.status.textContent = "Select a token to see its loss_mask.";
      return;
    }
    var token = this.stream[this.selected];
    var where = selectedWindow === "dropped" ? "in the dropped partial window" : "in window " + selectedWindow;
    this.status.textContent = "Token " + this.selected + " “" + token.text + "” has loss_mask " + token.mask +
      (token.mask === 1 ? " (a training target)" : " (context only, no loss)") + ", " + where + ".";
  };

  function init() {
    var roots = document.querySelectorAll("[data-guideloom-explorer]");
    Array.prototype.forEach.call(roots, function (root) {
      if (!root.guideloomExplorer) root.guideloomExplorer = new Explorer(root);
    });
  }

  window.GuideLoomExplorer = {
    EOS: EOS,
    DOCUMENTS: DOCUMENTS,
    buildStream: buildStream,
    buildChat: buildChat,
    CHAT: CHAT,
    computeWindows: computeWindows,
    init: init,
  };

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
