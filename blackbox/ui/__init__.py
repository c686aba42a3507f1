"""`blackbox ui`: the local web app that shows the record while it is written.

`app` holds the routes and the server, `data` the paged reads from the store, `pages` the HTML
shells, `security` the guard (token, Host, same-origin, CSP); `static/` is the one script and the
one stylesheet, served from the package (no CDN, no build step).
"""
