"""`blackbox ui`: the local web app that shows the record while it is written.

`app` holds the route table and builds the app, `routes_pages` and `routes_api` the routes (module
functions over the app's `context`), `data` the paged reads from the store, `pages` the HTML
shells, `security` the guard (token, Host by the rule the proxy shares, same-origin, CSP),
`server` how it is served; `static/` is the one script and the one stylesheet, served from the
package (no CDN, no build step).
"""
