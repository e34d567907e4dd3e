/* ldptut: figures on narrow screens.
 *
 * The book's figures are drawn for the desktop text column (about 1,030 px wide, shown there at 0.67 of that, so
 * matplotlib's 10 pt labels read at about 14 px). On a phone the column is about 380 px: shrunk to it, a figure's
 * labels would be 7 px. Where the column is narrower than MIN_SCALE of a figure's drawn width, the figure is shown at
 * MIN_SCALE instead (labels about 12 px) inside its output box, which scrolls sideways; a tap opens the image at
 * full size. Wider screens are left alone.
 */
(function () {
  "use strict";
  var MIN_SCALE = 0.6;

  function fit(img) {
    var box = img.closest(".cell_output");
    if (!box || !img.naturalWidth) return;
    var min = Math.ceil(img.naturalWidth * MIN_SCALE);
    if (box.clientWidth < min) {
      img.style.maxWidth = "none";
      img.style.width = min + "px";
      box.classList.add("ldptut-scroll");
      img.title = "Scroll sideways; tap to open the figure at full size";
    } else {
      img.style.maxWidth = "";
      img.style.width = "";
      box.classList.remove("ldptut-scroll");
      img.removeAttribute("title");
    }
  }

  function fitAll() {
    document.querySelectorAll(".cell_output img").forEach(function (img) {
      if (img.complete) fit(img); else img.addEventListener("load", function () { fit(img); }, {once: true});
    });
  }

  document.addEventListener("click", function (e) {
    var img = e.target.closest && e.target.closest(".ldptut-scroll img");
    if (img) window.open(img.currentSrc || img.src, "_blank", "noopener");
  });
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", fitAll); else fitAll();
  var pending;
  window.addEventListener("resize", function () { clearTimeout(pending); pending = setTimeout(fitAll, 100); });
})();
