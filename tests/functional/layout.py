"""What every page must do at any width, checked in the browser journeys: no sideways scroll
(a wide table scrolls inside its card) and no select cutting its chosen text while its form
has the room to show it whole."""

from __future__ import annotations

PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1366, "height": 900}

# Every visible single-choice select that cuts its chosen text although its form (or card) has
# the room to show it whole: "Since the release (≤" said half of "Since the release (≤ 7 days)"
# on the version-health page. A choice longer than the form itself may be cut (a phone).
CLIPPED_SELECTS = """() => [...document.querySelectorAll('select:not([multiple])')]
  .filter(s => s.offsetParent !== null && s.selectedIndex >= 0)
  .filter(s => {
    const style = getComputedStyle(s);
    const probe = document.createElement('span');
    probe.style.cssText = 'position:absolute;visibility:hidden;white-space:pre';
    for (const p of ['fontFamily', 'fontSize', 'fontWeight', 'letterSpacing']) probe.style[p] = style[p];
    probe.textContent = s.options[s.selectedIndex].text;
    document.body.appendChild(probe);
    const need = probe.getBoundingClientRect().width;
    probe.remove();
    const padding = parseFloat(style.paddingLeft) + parseFloat(style.paddingRight);
    const box = s.closest('form, .card, main') || document.body;
    return need > s.clientWidth - padding + 0.5 && need + padding <= box.clientWidth;
  })
  .map(s => `${s.id || s.name}: ${s.options[s.selectedIndex].text}`)"""


def sideways_scroll(page) -> int:
    """The page's overflow in px (0 when it fits the viewport)."""
    return page.evaluate("document.documentElement.scrollWidth - window.innerWidth")


def clipped_selects(page) -> list[str]:
    return page.evaluate(CLIPPED_SELECTS)


def layout_faults(page, *sizes: dict) -> dict:
    """The current page at each size (a phone and a laptop by default), reloaded there:
    {width: [what is wrong]}; empty when it fits. The viewport is put back after."""
    before = page.viewport_size
    faults = {}
    try:
        for size in sizes or (PHONE, LAPTOP):
            page.set_viewport_size(size)
            page.reload()
            page.wait_for_load_state("networkidle")
            found = []
            overflow = sideways_scroll(page)
            if overflow > 0:
                found.append(f"scrolls sideways by {overflow}px")
            found += [f"select cuts its choice: {c}" for c in clipped_selects(page)]
            if found:
                faults[size["width"]] = found
    finally:
        page.set_viewport_size(before)
        page.reload()
    return faults
