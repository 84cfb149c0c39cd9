"""Server-rendered SVG charts (no JavaScript library, nothing fetched from a CDN)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

OK_COLOUR = "#417690"  # the admin's own blue
OVER_COLOUR = "#ba2121"  # the admin's error red


def lag_bars(
    shards: Sequence[tuple[int, float]],
    *,
    threshold: float,
    width: int = 960,
    height: int = 160,
) -> SafeString:
    """One bar per ``(shard, lag seconds)``, red over ``threshold``, with the threshold line."""
    pad_left, pad_bottom, pad_top = 48, 18, 8
    plot_w, plot_h = width - pad_left - 4, height - pad_bottom - pad_top
    top = max([lag for _, lag in shards] + [threshold * 1.25, 1.0])
    step = plot_w / max(len(shards), 1)
    bars = []
    for i, (shard, lag) in enumerate(shards):
        h = plot_h * lag / top
        bars.append(
            (
                f"{pad_left + i * step:.2f}",
                f"{pad_top + plot_h - h:.2f}",
                f"{max(step - (1 if step > 3 else 0), 0.5):.2f}",
                f"{h:.2f}",
                OVER_COLOUR if lag > threshold else OK_COLOUR,
                "over" if lag > threshold else "ok",
                shard,
                f"{lag:.1f}",
            )
        )
    rects = format_html_join(
        "",
        '<rect x="{}" y="{}" width="{}" height="{}" fill="{}" class="bar {}"'
        ' data-shard="{}"><title>shard {} lag {} s</title></rect>',
        ((x, y, w, h, c, k, s, s, lag) for x, y, w, h, c, k, s, lag in bars),
    )
    threshold_y = pad_top + plot_h - plot_h * threshold / top
    return format_html(
        '<svg class="chart" id="lag-chart" viewBox="0 0 {w} {h}" width="100%" role="img"'
        ' aria-label="Lag per shard">'
        '<text x="0" y="{ty}" font-size="10">{top} s</text>'
        '<text x="0" y="{by}" font-size="10">0</text>'
        '<line x1="{pl}" x2="{w}" y1="{thy}" y2="{thy}" stroke="{red}" stroke-dasharray="4 3"/>'
        '<text x="{pl}" y="{thy_label}" font-size="10" fill="{red}">threshold {thr} s</text>'
        "{rects}"
        '<text x="{pl}" y="{h}" font-size="10">shard 0</text>'
        '<text x="{w}" y="{h}" font-size="10" text-anchor="end">shard {last}</text>'
        "</svg>",
        w=width,
        h=height,
        ty=pad_top + 8,
        top=f"{top:.0f}",
        by=pad_top + plot_h,
        pl=pad_left,
        thy=f"{threshold_y:.2f}",
        thy_label=f"{max(threshold_y - 3, 10):.2f}",
        red=OVER_COLOUR,
        thr=f"{threshold:g}",
        rects=rects,
        last=shards[-1][0] if shards else 0,
    )


def time_series(
    minutes: Sequence[datetime],
    values: Sequence[int],
    *,
    label: str,
    element_id: str,
    width: int = 460,
    height: int = 120,
) -> SafeString:
    """A line over the last minutes, with its maximum and the time at each end."""
    pad_left, pad_bottom, pad_top = 48, 18, 14
    plot_w, plot_h = width - pad_left - 4, height - pad_bottom - pad_top
    top = max(max(values, default=0), 1)
    step = plot_w / max(len(values) - 1, 1)
    points = " ".join(
        f"{pad_left + i * step:.1f},{pad_top + plot_h - plot_h * v / top:.1f}"
        for i, v in enumerate(values)
    )
    first = minutes[0].strftime("%H:%M") if minutes else ""
    last = minutes[-1].strftime("%H:%M") if minutes else ""
    return format_html(
        '<svg class="chart" id="{id}" viewBox="0 0 {w} {h}" width="{w}" role="img"'
        ' aria-label="{label}">'
        '<text x="{pl}" y="10" font-size="11" font-weight="bold">{label} (now {now})</text>'
        '<text x="0" y="{ty}" font-size="10">{top}</text>'
        '<text x="0" y="{by}" font-size="10">0</text>'
        '<line x1="{pl}" x2="{w}" y1="{by}" y2="{by}" stroke="#999"/>'
        '<polyline fill="none" stroke="{c}" stroke-width="2" points="{points}"/>'
        '<text x="{pl}" y="{h}" font-size="10">{first}</text>'
        '<text x="{w}" y="{h}" font-size="10" text-anchor="end">{last} UTC</text>'
        "</svg>",
        id=element_id,
        w=width,
        h=height,
        label=label,
        now=values[-1] if values else 0,
        pl=pad_left,
        ty=pad_top + 8,
        top=top,
        by=pad_top + plot_h,
        c=OK_COLOUR,
        points=mark_safe(points),  # noqa: S308 (numbers we formatted above)
        first=first,
        last=last,
    )
