// Mentis dashboard: progressive enhancement only; every page works without this file.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  // Filters with data-autosubmit apply as soon as a choice changes.
  for (const select of document.querySelectorAll("select[data-autosubmit]")) {
    select.addEventListener("change", () => select.form.requestSubmit());
  }
  // Copy buttons: data-copy names the input whose value is copied.
  for (const button of document.querySelectorAll("button[data-copy]")) {
    button.addEventListener("click", async () => {
      const input = document.getElementById(button.dataset.copy);
      input.select();
      try {
        await navigator.clipboard.writeText(input.value);
        button.textContent = "Copied";
      } catch {
        button.textContent = "Press Ctrl+C";
      }
    });
  }
  // Opening a timeline at #a-<id> highlights that attempt.
  if (location.hash.startsWith("#a-")) {
    const target = document.getElementById(location.hash.slice(1));
    if (target) target.classList.add("is-target");
  }
});
