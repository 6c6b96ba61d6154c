"""Self-contained HTML pages of threads, diffs and corpora (private to :mod:`tulip_nb.lab`).

The public entry is :mod:`tulip_nb.lab.share`; :func:`tulip_nb.lab.to_html` (a thread, a diff or a
corpus) delegates to it. The modules here split the work by responsibility:

- :mod:`._document`: the page skeleton -- a Content-Security-Policy that allows no network
  request and runs only our own inline scripts (by hash), the inline CSS, data embedded as JSON
  in ``<script type="application/json">`` with ``<``, ``>``, ``&``, U+2028/U+2029 escaped;
- :mod:`._text`: escaping and truncation of untrusted text (every string from a thread);
- :mod:`._thread`, :mod:`._diff`, :mod:`._corpus`: what each page shows;
- ``assets/``: the CSS and the plain JavaScript (no framework, no CDN).

Thread content is data written by models and tools: it only ever reaches a page as escaped HTML
text or as JSON that the script puts into the DOM with ``textContent``, never as markup.
"""

from tulip_nb.lab._pages._corpus import write_site
from tulip_nb.lab._pages._diff import diff_page
from tulip_nb.lab._pages._document import page_name, write_page
from tulip_nb.lab._pages._thread import thread_page

__all__ = ["diff_page", "page_name", "thread_page", "write_page", "write_site"]
