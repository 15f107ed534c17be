# pyrun's R side of the R worker (main.ts evaluates this file once, at
# start-up). It returns one environment of functions; main.ts keeps a handle
# on it and calls run() for every call. Nothing here is on the search path,
# so user code does not see it by accident (it is no security boundary:
# Deno's permissions are).
local({
  pyrun <- environment()
  plot_dir <- "/pyrun/plots"
  dir.create(plot_dir, recursive = TRUE, showWarnings = FALSE)
  dir.create("/output", showWarnings = FALSE)

  # Files a graphics device was opened on during the running call:
  # list(pattern, mime), pattern as the device got it (%d for pages).
  plots <- list()
  plot_count <- 0L
  call_start <- Sys.time()

  record_plot <- function(filename, mime) {
    filename <- path.expand(filename)
    if (!startsWith(filename, "/")) filename <- file.path(getwd(), filename)
    plots[[length(plots) + 1L]] <<- list(pattern = filename, mime = mime)
  }

  # Every file device of grDevices records its file, so that each page
  # any of them writes comes back as a display (docs/protocol.md, Engines: R).
  # The wrapper keeps the device's own formals and body: only one call is
  # put in front of it.
  devices <- list(
    png = "image/png", jpeg = "image/jpeg", bmp = "image/bmp", tiff = "image/tiff",
    svg = "image/svg+xml", pdf = "application/pdf", cairo_pdf = "application/pdf"
  )
  name_arg <- c(pdf = "file", cairo_pdf = "filename")
  ns <- asNamespace("grDevices")
  pkg <- as.environment("package:grDevices")
  replace_binding <- function(env, name, value) {
    if (!exists(name, envir = env, inherits = FALSE)) return(invisible())
    locked <- bindingIsLocked(name, env)
    if (locked) unlockBinding(name, env)
    assign(name, value, envir = env)
    if (locked) lockBinding(name, env)
  }
  for (dev in names(devices)) {
    orig <- get(dev, envir = ns)
    arg <- if (dev %in% names(name_arg)) name_arg[[dev]] else "filename"
    wrapped <- orig
    # pdf(file = NULL) writes nothing: only a name is recorded.
    rec <- call("if", call("is.character", as.name(arg)),
                as.call(list(record_plot, as.name(arg), devices[[dev]])))
    body(wrapped) <- call("{", rec, body(orig))
    replace_binding(ns, dev, wrapped)
    replace_binding(pkg, dev, wrapped)
  }

  # The device a plot opens when none is open: a PNG in pyrun's own folder,
  # one file per page.
  default_device <- function(...) {
    plot_count <<- plot_count + 1L
    grDevices::png(file.path(plot_dir, sprintf("plot-%d-%%03d.png", plot_count)),
                   width = 672, height = 480)
  }

  # webR's canvas() device needs a browser's OffscreenCanvas: in Deno it
  # ends the process. eval_js runs JavaScript in R's thread: only Deno's
  # permissions bound it, and pyrun offers no such door. q() would end R
  # and with it the worker.
  refuse <- function(what, why) {
    force(what)
    force(why)
    function(...) stop(sprintf("%s is not available in pyrun: %s", what, why), call. = FALSE)
  }
  webr_ns <- asNamespace("webr")
  # R's console lines reach main.ts as webR's stdout and stderr messages
  # while a call runs. Emscripten holds a line until its newline: a text
  # left without one (cat("x")) would start the next call's first line, so
  # run() and cleanup() hand it on. The JavaScript runs in R's thread,
  # through eval_js as it was before it is taken away below.
  js <- get("eval_js", envir = webr_ns)
  # marker: a line written after the held text, to fd 1 below R (so that
  # no sink() diverts it), by which main.ts knows it has read every line
  # the call wrote: webR's answer to the call can overtake the last ones.
  flush_console <- function(marker = "") {
    end <- if (nzchar(marker)) {
      paste0("{ const s = Module.FS.getStream(1); const b = new TextEncoder().encode(",
        deparse(paste0(marker, "\n")), "); Module.FS.write(s, b, 0, b.length); } ")
    } else ""
    js(paste0("for (const fd of [1, 2]) { const s = Module.FS.getStream(fd); if (s && s.tty) s.stream_ops.fsync(s); }; ", end, "0"))
    invisible()
  }
  replace_binding(webr_ns, "canvas", refuse("webr::canvas()", "use png() or svg(); plots come back as images"))
  replace_binding(webr_ns, "eval_js", refuse("webr::eval_js()", "R code runs without JavaScript"))
  for (name in c("eval_js_async", "install", "mount", "unmount")) {
    replace_binding(webr_ns, name, refuse(sprintf("webr::%s()", name), "not in this sandbox"))
  }
  if ("package:webr" %in% search()) {
    for (name in c("canvas", "eval_js", "install", "mount", "unmount")) {
      replace_binding(as.environment("package:webr"), name, get(name, envir = webr_ns))
    }
  }
  for (name in c("q", "quit")) {
    replace_binding(baseenv(), name, refuse(paste0(name, "()"), "the worker serves the next call"))
  }
  replace_binding(baseenv(), "system", refuse("system()", "there are no processes"))
  replace_binding(baseenv(), "system2", refuse("system2()", "there are no processes"))

  # Finalizers (reg.finalizer) registered and not yet run: one of a
  # stateless call's objects would otherwise run its finalizer in a later
  # call, whenever R collected it. reset() collects until none is left.
  finalizers_pending <- 0L
  note_finalizer <- function(n) {
    finalizers_pending <<- finalizers_pending + n
    invisible()
  }
  # Whether a call unlocked a binding (unlockBinding(), which trace(),
  # assignInNamespace() and the like call): then reset() compares the
  # locked environments too.
  unlock_marked <- FALSE
  unlocked <- list() # the bindings unlocked: list(name, env) each
  mark_unlock <- function(sym, env) {
    unlock_marked <<- TRUE
    unlocked[[length(unlocked) + 1L]] <<- list(as.character(sym), env)
    invisible()
  }
  # Whether a call used debug() or debugonce(): they mark the function
  # itself, in place, so that a later call of it would wait in the browser.
  debug_marked <- FALSE
  mark_debug <- function() {
    debug_marked <<- TRUE
    invisible()
  }
  # The wrappers keep the functions' own formals and environment; pyrun's
  # functions are put into their bodies as objects, as for the devices.
  wrapped <- get("reg.finalizer", envir = baseenv())
  # Only the call's own code is counted: a package's (parallel's .onLoad
  # registers one to run at R's exit) is R's.
  body(wrapped) <- bquote({
    if (!isNamespace(topenv(parent.frame()))) {
      .(note_finalizer)(1L)
      pyrun_f <- match.fun(f)
      f <- function(x) {
        .(note_finalizer)(-1L)
        pyrun_f(x)
      }
    }
    .Internal(reg.finalizer(e, f, onexit))
  })
  replace_binding(baseenv(), "reg.finalizer", wrapped)
  for (name in c("debug", "debugonce")) {
    wrapped <- get(name, envir = baseenv())
    body(wrapped) <- call("{", as.call(list(mark_debug)), body(wrapped))
    replace_binding(baseenv(), name, wrapped)
  }
  unlock_binding <- get("unlockBinding", envir = baseenv()) # pyrun's own, unmarked
  wrapped <- unlock_binding
  body(wrapped) <- call("{", as.call(list(mark_unlock, quote(sym), quote(env))), body(wrapped))
  replace_binding(baseenv(), "unlockBinding", wrapped)
  # Whether a call locked an environment or a binding: reset() then looks
  # for a watched environment locked (later calls could not register an S3
  # method, a hook, ...).
  lock_marked <- FALSE
  mark_lock <- function() {
    lock_marked <<- TRUE
    invisible()
  }
  lock_binding <- get("lockBinding", envir = baseenv()) # pyrun's own, unmarked
  for (name in c("lockEnvironment", "lockBinding")) {
    wrapped <- get(name, envir = baseenv())
    body(wrapped) <- call("{", as.call(list(mark_lock)), body(wrapped))
    replace_binding(baseenv(), name, wrapped)
  }

  options(device = default_device)
  baseline <- NULL # taken at the end of this file, once pyrun is set up

  write_err <- function(text) cat(text, file = stderr())

  format_call <- function(call) paste(deparse(call, nlines = 1L), collapse = "")

  # The call a condition names, unless it is pyrun's own eval of a
  # top-level expression (stop("x") at top level says just "Error: x").
  user_call <- function(cond) {
    call <- conditionCall(cond)
    if (is.null(call) || identical(call, quote(eval(expr, env_now)))) return(NULL)
    call
  }

  condition_text <- function(kind, cond) {
    call <- user_call(cond)
    msg <- conditionMessage(cond)
    if (is.null(call)) sprintf("%s: %s", kind, msg) else sprintf("%s in %s : %s", kind, format_call(call), msg)
  }

  show_value <- function(value) {
    if (isS4(value)) methods::show(value) else print(value)
  }

  # run() evaluates the code in the global environment (a session's own on
  # a shared session worker: env_now, enter()), expression by
  # expression, printing each visible value as R's console does. It
  # returns list(status, error, value, has_value); value is to_plain() of
  # the last expression's value when that was visible.
  run <- function(code, marker = "") {
    on.exit(flush_console(marker))
    plots <<- list()
    call_start <<- Sys.time()
    exprs <- tryCatch(parse(text = code, keep.source = FALSE), error = function(e) e)
    if (inherits(exprs, "error")) {
      return(list(status = "run-error", error = paste0("Error: ", conditionMessage(exprs))))
    }
    last <- list(visible = FALSE)
    status <- tryCatch(
      withCallingHandlers(
        {
          for (expr in exprs) {
            last <- list(visible = FALSE)
            last <- withVisible(eval(expr, env_now))
            if (last$visible) show_value(last$value)
          }
          list(status = "success")
        },
        warning = function(w) {
          if (getOption("warn", 0) >= 0) write_err(paste0(condition_text("Warning", w), "\n"))
          invokeRestart("muffleWarning")
        },
        message = function(m) {
          write_err(conditionMessage(m))
          invokeRestart("muffleMessage")
        }
      ),
      error = function(e) list(status = "run-error", error = condition_text("Error", e)),
      interrupt = function(i) list(status = "interrupted", error = "interrupted")
    )
    if (status$status == "success" && last$visible && !is.null(last$value)) {
      status$value <- tryCatch(to_plain(last$value), error = function(e) NULL)
      status$has_value <- TRUE
    }
    # What main.ts sends after the output: the pages the call's devices
    # wrote and the files under /output/ (after()).
    status$rich <- tryCatch(after(), error = function(e) character(), interrupt = function(i) character())
    status
  }

  # to_plain turns an R value into nested plain lists and atomic vectors
  # that main.ts writes as JSON (the forms docs/protocol.md lists).
  to_plain <- function(x, depth = 0L) {
    if (depth > 64L) return("<too deep>")
    if (is.null(x)) return(NULL)
    if (is.data.frame(x)) {
      cols <- lapply(x, function(col) to_plain(col, depth + 1L))
      n <- nrow(x)
      rows <- vector("list", n)
      for (i in seq_len(n)) {
        rows[[i]] <- lapply(cols, function(col) if (is.list(col)) col[[i]] else col[i])
      }
      return(rows)
    }
    if (is.factor(x)) return(keep_names(as.character(x), x))
    if (inherits(x, "Date")) return(keep_names(format(x, "%Y-%m-%d"), x))
    if (inherits(x, "POSIXt")) return(keep_names(format(as.POSIXct(x), "%Y-%m-%dT%H:%M:%SZ", tz = "UTC"), x))
    if (is.atomic(x)) {
      if (is.complex(x)) x <- keep_names(as.character(x), x)
      if (is.raw(x)) x <- keep_names(as.integer(x), x)
      if (is.matrix(x)) {
        return(lapply(seq_len(nrow(x)), function(i) to_plain(unname(x[i, ]), depth + 1L)))
      }
      return(keep_names(as.vector(unclass(x)), x))
    }
    if (is.list(x)) return(keep_names(lapply(unclass(x), to_plain, depth = depth + 1L), x))
    if (is.environment(x)) return(format(x))
    paste(deparse(x), collapse = "\n")
  }
  keep_names <- function(value, from) {
    names(value) <- names(from)
    value
  }

  # finish() closes every graphics device and returns the files they
  # wrote during the call, in order: list(path, mime).
  finish <- function() {
    if (!length(plots) && is.null(grDevices::dev.list())) return(list())
    graphics.off()
    out <- list()
    for (p in plots) {
      files <- if (grepl("%", p$pattern, fixed = TRUE)) {
        found <- character()
        for (i in seq_len(999L)) {
          f <- tryCatch(sprintf(p$pattern, i), error = function(e) "")
          if (!nzchar(f) || !file.exists(f)) break
          found <- c(found, f)
        }
        found
      } else {
        p$pattern[file.exists(p$pattern)]
      }
      # Normalised, so that main.ts knows a page under /output/ however
      # the code named it ("/output/./p.png", "p.png" there).
      files <- normalizePath(files, winslash = "/", mustWork = FALSE)
      for (f in unique(files)) {
        if (file.mtime(f) >= call_start - 1) out[[length(out) + 1L]] <- list(path = f, mime = p$mime)
      }
    }
    plots <<- list()
    out
  }

  # Empties a folder, keeping the folder, through Emscripten's FS in R's
  # thread (guards.ts's clearFolder, as clear_js): R's
  # list.files gets names cut at 255 bytes, which unlink cannot find.
  clear_js <- "<<pyrun:clearFolder>>" # main.ts puts guards.ts's clearFolder here
  clear_dir <- function(dirs) {
    list <- paste0("[", paste(vapply(dirs, deparse, ""), collapse = ","), "]")
    js(paste0("{ const clear = ", clear_js, "; for (const d of ", list, ") clear(Module.FS, d); } 0"))
    invisible()
  }

  make_parent <- function(path) {
    dir.create(dirname(path), recursive = TRUE, showWarnings = FALSE)
    invisible()
  }

  # The regular files under /output/ (paths relative to it) with a stamp
  # that changes when a file's bytes do: size and MD5. Not mtime: as R
  # reads it from webR's file system it sometimes differed for a file
  # nobody touched, which resent a session's earlier files.
  output_files <- function() {
    paths <- sort(list.files("/output", recursive = TRUE, all.files = TRUE))
    if (!length(paths)) return(list(path = character(), stamp = character()))
    info <- file.info(file.path("/output", paths))
    # A name R cannot stat (cut at 255 bytes by its listing) is skipped.
    keep <- !is.na(info$isdir) & !info$isdir
    list(
      path = paths[keep],
      stamp = paste(info$size[keep], unname(tools::md5sum(file.path("/output", paths[keep]))))
    )
  }

  # before() readies the files of a call: /output/ emptied unless kept,
  # the parent folders of its input files made. With keep it returns the
  # stamps of the files /output/ holds, flat: path, stamp, path, stamp...
  before <- function(keep, parents = character()) {
    if (!keep) clear_dir("/output")
    for (d in parents) dir.create(d, recursive = TRUE, showWarnings = FALSE)
    if (!keep) return(character())
    flat_outputs()
  }

  flat_outputs <- function() {
    o <- output_files()
    as.character(rbind(o$path, o$stamp))
  }

  # after() closes the call's graphics devices and lists, flat, for
  # main.ts to read and send: the number of plot files the devices wrote,
  # then each as mime, path, then every file under /output/ as path, stamp.
  after <- function() {
    plots <- finish()
    c(
      as.character(length(plots)),
      unlist(lapply(plots, function(p) c(p$mime, p$path))),
      flat_outputs()
    )
  }

  # cleanup() ends a call: pyrun's plot files go; a stateless call's
  # traces go too (reset), and /output/ unless kept. It returns reset()'s
  # verdict: "" or why the worker must not take another call.
  cleanup <- function(keep, session) {
    flush_console()
    # A call interrupted outside run() did not close its devices.
    if (!is.null(grDevices::dev.list())) graphics.off()
    plots <<- list()
    why <- if (session) "" else reset()
    if (session) keep_globals()
    # pyrun's plot files; a stateless call's working directory and /tmp
    # (R's own temporary folder is made again), /output/ unless kept: in
    # one trip to JavaScript.
    clear_dir(c(plot_dir, if (!session) c(baseline$wd, "/tmp"), if (!keep) "/output"))
    if (!session) {
      tempdir(check = TRUE)
      forget_last_value()
    }
    why
  }

  # R keeps the value of the last evaluation at top level in base's
  # .Last.value, and pyrun's own evaluations count: after reset() it held
  # what options() gave back, the options the call had set.
  forget_last_value <- function() {
    unlock_binding(".Last.value", baseenv())
    assign(".Last.value", NULL, envir = baseenv())
    lock_binding(".Last.value", baseenv())
    if (exists(".Traceback", envir = baseenv(), inherits = FALSE)) {
      try(assign(".Traceback", NULL, envir = baseenv()), silent = TRUE)
    }
  }

  # ---- What a stateless call leaves, and how reset() undoes it ----------
  #
  # reset() returns "" when R is as the worker started, or why the worker
  # must not take another call (main.ts says so in its idle event, and the
  # supervisor replaces it): what R offers no way back from. It undoes:
  #
  #  - the global environment (emptied; a locked one cannot be: recycle),
  #    its attributes and the search path (what a call attached is
  #    detached; a chain a call rewired with parent.env<- is set back);
  #  - namespaces a call loaded (unloaded again: library(grid) costs each
  #    call that makes it; one that will not unload: recycle);
  #  - the bindings of base, of every namespace loaded at the start, of the
  #    attached packages and Autoloads, and of the environments those hold
  #    (S3 method tables, hooks of setHook, S4's class and generic tables,
  #    the environments of their closures): trace(), assignInNamespace(),
  #    unlockBinding() then assign(), registerS3method(), setHook(),
  #    makeActiveBinding() in Autoloads are all bindings changed or added
  #    there, set back or removed (a lazily loaded data set that changed
  #    cannot be: recycle);
  #  - finalizers a call registered (collected until they ran; one still
  #    reachable: recycle), debug() marks, trace's on/off switch, task
  #    callbacks, the byte-code compiler's level, sinks and connections,
  #    options(), environment variables, the random number generator's
  #    kinds (the seed is the global environment's), the locale, the
  #    working directory and the files in it and in /tmp;
  #  - S4 classes and methods a call defined (setClass, setMethod,
  #    setGeneric) live in tables no API empties: recycle.
  #
  # What is not undone: changes made through R's C interfaces and webR's
  # JavaScript (.Internal, .Call), as Python's import js (docs/security.md, Isolation
  # between calls); environments deeper than those listed.

  # The environments whose bindings reset() keeps, and what they hold.
  # Two kinds, for the time a check takes:
  #
  #  - locked ones (base, the namespaces, the attached packages), whose
  #    bindings are locked too: a call changes one only after
  #    unlockBinding(), which trace(), assignInNamespace() and the like
  #    call (base's, which pyrun marks). They are compared, all ~8,000
  #    bindings, only after a call that called it (~5 ms), and so are a
  #    few of base's bindings that are not locked, after every call;
  #  - unlocked ones: Autoloads, the S3 method tables, setHook's hooks, S4's
  #    class and generic tables and the environments of other closures
  #    (.libPaths's paths, ps.options): compared
  #    after every call. S4 generics' environments (their method tables)
  #    only with the locked ones: a call that defines S4 methods is found
  #    by their metadata instead (reset()).
  #
  # base's bindings live on R's symbols (as.list scans the whole symbol
  # table, ~1 ms); mget of its names reads them directly.

  # Names in base bound to state R itself changes as it runs, restored by
  # other means (options(), graphics.off()) or harmless: never compared.
  volatile <- c(".Options", ".Devices", ".Device", ".Random.seed", ".Last.value", ".Traceback")

  # base's names, but the volatile ones and its active bindings
  # (.Library.site), which reading would call.
  base_names <- function() {
    names <- ls(baseenv(), all.names = TRUE)
    setdiff(names[!vapply(names, bindingIsActive, NA, env = baseenv())], volatile)
  }

  watched <- function() {
    top <- list(base = baseenv())
    for (ns in setdiff(loadedNamespaces(), "base")) top[[paste0("namespace:", ns)]] <- asNamespace(ns)
    for (s in search()) {
      if (s == "Autoloads" || (startsWith(s, "package:") && s != "package:base")) top[[s]] <- as.environment(s)
    }
    seen <- c(list(globalenv(), emptyenv(), pyrun), top)
    known <- function(e) {
      # Namespaces are watched themselves; pyrun's own closures (refuse())
      # hold only its words.
      if (isNamespace(e) || identical(parent.env(e), pyrun)) return(TRUE)
      for (x in seen) if (identical(x, e)) return(TRUE)
      FALSE
    }
    envs <- top
    generics <- character()
    for (key in names(top)) {
      # Its bindings are promises of lazily loaded data: reading them
      # would load every data set (3 s).
      if (key == "package:datasets") next
      vals <- values(key, top[[key]], if (key == "base") base_names())
      for (n in names(vals)) {
        v <- vals[[n]]
        held <- if (is.environment(v)) v else if (is.function(v) && !is.primitive(v)) environment(v)
        if (is.null(held) || known(held)) next
        seen[[length(seen) + 1L]] <- held
        k <- paste0(key, "$", n)
        envs[[k]] <- held
        if (methods::is(v, "genericFunction")) generics <- c(generics, k)
      }
    }
    structure(envs, generics = generics)
  }

  # The bindings of one watched environment as a named list, without
  # calling its active bindings or forcing its promises where that matters:
  # package:datasets's lazily loaded data is read with substitute(), which
  # gives a promise's expression, not its value. Given names (the
  # baseline's), an unlocked environment is read by name: what a call
  # added is not read (a namespace's S3 registrations are promises that
  # would load it again), and a name gone reads as `absent`.
  values <- function(key, env, names) {
    if (key == "base") return(mget(names, envir = env))
    if (key == "package:datasets") {
      if (is.null(names)) names <- ls(env, all.names = TRUE)
      v <- eval(call("substitute", as.call(c(as.name("list"), lapply(names, as.name))), env))
      return(stats::setNames(as.list(v)[-1L], names))
    }
    if (is.null(names) || environmentIsLocked(env)) return(env_list(env))
    mget(names, envir = env, ifnotfound = list(absent))
  }
  absent <- new.env(parent = emptyenv())

  # An environment's bindings, all names, unsorted: as.list.environment()
  # without its argument matching, which costs ~70 us a call here, 8 times
  # the listing of a small environment.
  env_list <- function(e) .Internal(env2list(e, TRUE, FALSE))

  take_baseline <- function() {
    envs <- watched()
    snap <- lapply(names(envs), function(k) {
      env <- envs[[k]]
      names <- if (k == "base") base_names()
      v <- values(k, env, names)
      locked <- environmentIsLocked(env)
      list(names = names(v), values = v, locked = locked,
           all = ls(env, all.names = TRUE, sorted = FALSE),
           bound = if (locked) names(v)[vapply(names(v), bindingIsLocked, NA, env = env)])
    })
    names(snap) <- names(envs)
    locked <- vapply(snap, `[[`, NA, "locked")
    always <- names(envs)[!locked & !(names(envs) %in% attr(envs, "generics"))]
    chain <- list()
    e <- globalenv()
    while (!identical(e, emptyenv())) {
      chain[[length(chain) + 1L]] <- e
      e <- parent.env(e)
    }
    base_open <- setdiff(snap$base$names, snap$base$bound)
    list(
      envs = envs,
      snap = snap,
      # The unlocked environments compared after every call, as one list
      # each: their sizes, their bindings, their attributes.
      always = always,
      always_counts = vapply(envs[always], length, 1L),
      always_values = lapply(envs[always], env_list),
      attrs = lapply(envs, attributes),
      # base's bindings that are not locked, compared after every call.
      base_open = base_open,
      base_open_values = mget(base_open, envir = baseenv()),
      namespaces = loadedNamespaces(),
      chain = chain,
      search = search(),
      options = options(),
      env = Sys.getenv(),
      environ = .Internal(Sys.getenv(character(), "")),
      connections = getAllConnections(),
      wd = getwd(),
      rng = RNGkind(),
      locale = Sys.getlocale(),
      callbacks = getTaskCallbackNames(),
      jit = .Internal(enableJIT(-1L))
    )
  }

  # Sets name in env back to value, through its lock; a binding made
  # active is removed first (assign() would call it).
  put_back <- function(env, name, value) {
    if (exists(name, envir = env, inherits = FALSE) && bindingIsActive(name, env)) {
      if (!environmentIsLocked(env)) rm(list = name, envir = env)
    }
    locked <- exists(name, envir = env, inherits = FALSE) && bindingIsLocked(name, env)
    if (locked) unlock_binding(name, env)
    assign(name, value, envir = env)
    if (locked) lock_binding(name, env)
  }

  # Sets one watched environment back: names added go (unread), bindings
  # changed get their value back, and, in a locked environment, bindings
  # unlocked are locked again. Returns list(changed, why).
  restore_env <- function(key) {
    env <- baseline$envs[[key]]
    b <- baseline$snap[[key]]
    changed <- character()
    why <- character()
    if (environmentIsLocked(env) != b$locked) return(list(changed, paste(key, "was locked")))
    if (!identical(attributes(env), baseline$attrs[[key]])) {
      attributes(env) <- baseline$attrs[[key]]
      changed <- paste0(key, "$<attributes>")
    }
    # As it was (names cannot be added to a locked one).
    now <- values(key, env, b$names)
    if (identical(now, b$values) && (b$locked || length(env) == length(b$all))) return(list(changed, why))
    extra <- setdiff(ls(env, all.names = TRUE, sorted = FALSE), b$all)
    if (length(extra)) {
      if (b$locked) return(list(changed, paste(key, "has bindings added")))
      rm(list = extra, envir = env)
      changed <- c(changed, paste0(key, "$", extra))
    }
    # A locked environment's list comes in its own order: compare by name.
    same <- b$names %in% names(now)
    same[same] <- mapply(identical, now[b$names[same]], b$values[same], USE.NAMES = FALSE)
    for (i in which(!same)) {
      n <- b$names[[i]]
      if (key == "package:datasets") {
        why <- c(why, paste0(key, "$", n, " changed"))
        next
      }
      put_back(env, n, b$values[[i]])
      changed <- c(changed, paste0(key, "$", n))
    }
    list(unique(changed), why)
  }

  # Locks again the bindings of watched locked environments that calls
  # unlocked (unlockBinding(), marked): left open, a later call could
  # change them without unlockBinding, unseen.
  relock <- function() {
    for (u in unlocked) {
      for (key in names(baseline$envs)) {
        env <- baseline$envs[[key]]
        if (!identical(env, u[[2]])) next
        n <- u[[1]]
        if (n %in% baseline$snap[[key]]$bound && exists(n, envir = env, inherits = FALSE) &&
            !bindingIsLocked(n, env)) {
          lock_binding(n, env)
        }
      }
    }
    unlocked <<- list()
  }

  # One pass over the watched environments (the locked ones only if full):
  # what differs from the baseline is set back. Returns the keys changed
  # ("key$name"), and in attr "recycle" why R cannot be set back, if so.
  restore_bindings <- function(full) {
    keys <- if (full) names(baseline$envs) else character()
    # The unlocked environments, each read as a whole when its size is
    # the same (what a call added could be a promise that loads a
    # namespace again: read by name, in restore_env).
    envs <- baseline$envs[baseline$always]
    sized <- vapply(envs, length, 1L) == baseline$always_counts
    if (!all(sized)) keys <- c(keys, baseline$always[!sized])
    now <- lapply(envs[sized], env_list)
    if (!identical(now, baseline$always_values[sized])) {
      same <- mapply(identical, now, baseline$always_values[sized])
      keys <- c(keys, baseline$always[sized][!same])
    }
    if (lock_marked && any(vapply(envs, environmentIsLocked, NA))) keys <- c(keys, baseline$always)
    if (length(baseline$base_open) &&
        !identical(mget(baseline$base_open, envir = baseenv()), baseline$base_open_values)) {
      keys <- c(keys, "base")
    }
    changed <- character()
    why <- character()
    for (key in unique(keys)) {
      r <- restore_env(key)
      changed <- c(changed, r[[1]])
      why <- c(why, r[[2]])
    }
    structure(changed, recycle = why)
  }

  # Namespaces loaded since the start go, dependants first: those that
  # import no other one left go in each round.
  unload_new <- function() {
    if (identical(loadedNamespaces(), baseline$namespaces)) return(TRUE)
    for (round in 1:10) {
      new <- setdiff(loadedNamespaces(), baseline$namespaces)
      if (!length(new)) return(TRUE)
      for (ns in new) try(unloadNamespace(ns), silent = TRUE)
    }
    !length(setdiff(loadedNamespaces(), baseline$namespaces))
  }

  # Undoes debug() and debugonce() on every function of the watched
  # environments (only after a call that used them: ~10,000 functions).
  undebug_all <- function() {
    for (key in names(baseline$envs)) {
      if (key == "package:datasets") next
      vals <- values(key, baseline$envs[[key]], baseline$snap[[key]]$names)
      for (f in vals) {
        if (is.function(f) && !is.primitive(f) && isdebugged(f)) undebug(f)
      }
    }
    debug_marked <<- FALSE
  }

  # What the last reset() set back: key$name of the bindings, for the tests.
  last_restored <- character()

  reset <- function() {
    why <- character()
    # Its files go after it (cleanup), with what code run here wrote.
    setwd(baseline$wd)
    # (.Internal: sink.number()'s match.arg takes a millisecond.)
    while (.Internal(sink.number(TRUE)) > 0L) sink()
    if (.Internal(sink.number(FALSE)) != 2L) sink(type = "message")
    # Connections the call left open; not webR's own, through which this
    # very evaluation's output goes (class "outputConnection").
    conns <- getAllConnections()
    if (!identical(conns, baseline$connections)) for (i in setdiff(conns, baseline$connections)) {
      con <- getConnection(i)
      if (summary(con)$class != "outputConnection") try(close(con), silent = TRUE)
    }
    # S4 definitions of the call: metadata in the global environment.
    names <- ls(globalenv(), all.names = TRUE)
    if (any(startsWith(names, ".__C__") | startsWith(names, ".__T__"))) {
      why <- c(why, "S4 classes or methods were defined")
    }
    if (environmentIsLocked(globalenv())) {
      why <- c(why, "the global environment was locked")
    } else {
      rm(list = names, envir = globalenv())
    }
    if (length(attributes(globalenv()))) attributes(globalenv()) <- NULL
    if (!identical(search(), baseline$search)) {
      for (name in setdiff(search(), baseline$search)) {
        try(detach(name, character.only = TRUE), silent = TRUE)
      }
    }
    if (!unload_new()) why <- c(why, "a namespace it loaded would not unload")
    # The search path, link by link (parent.env<- rewires it in place).
    chain <- baseline$chain
    for (i in seq_along(chain)) {
      parent <- if (i < length(chain)) chain[[i + 1L]] else emptyenv()
      if (!identical(parent.env(chain[[i]]), parent)) parent.env(chain[[i]]) <- parent
    }
    # Bindings, until a pass finds nothing to set back (code they ran,
    # an active binding's, may have changed what an earlier pass saw);
    # then the call's finalizers: its objects, now unreachable, are
    # collected, and the bindings looked at again after any ran.
    restored <- character()
    for (pass in 1:4) {
      # Code that ran (a finalizer, a promise put in a namespace) may load
      # a namespace again, or unlock a binding.
      if (pass > 1L && !unload_new()) why <- c(why, "a namespace it loaded would not unload")
      full <- unlock_marked
      unlock_marked <<- FALSE
      changed <- restore_bindings(full)
      why <- c(why, attr(changed, "recycle"))
      restored <- c(restored, changed)
      if (length(changed)) next
      if (finalizers_pending <= 0L || pass == 4L) break
      gc()
    }
    if (length(changed)) why <- c(why, "its bindings kept changing")
    relock()
    unlock_marked <<- FALSE
    lock_marked <<- FALSE
    if (finalizers_pending > 0L) {
      why <- c(why, "a finalizer it registered has not run")
      finalizers_pending <<- 0L
    }
    last_restored <<- unique(restored)
    if (debug_marked) undebug_all()
    if (!tracingState()) tracingState(TRUE)
    callbacks <- getTaskCallbackNames()
    if (!identical(callbacks, baseline$callbacks)) {
      for (name in setdiff(callbacks, baseline$callbacks)) removeTaskCallback(name)
    }
    if (.Internal(enableJIT(-1L)) != baseline$jit) invisible(.Internal(enableJIT(baseline$jit)))
    set_options(baseline$options)
    # (.Internal: Sys.getenv() splits every NAME=value, ~1 ms.)
    if (!identical(.Internal(Sys.getenv(character(), "")), baseline$environ)) {
      env <- Sys.getenv()
      Sys.unsetenv(setdiff(names(env), names(baseline$env)))
      changed <- names(baseline$env)[baseline$env != env[names(baseline$env)] | is.na(env[names(baseline$env)])]
      if (length(changed)) do.call(Sys.setenv, as.list(baseline$env[changed]))
    }
    if (!identical(RNGkind(), baseline$rng)) do.call(RNGkind, as.list(baseline$rng))
    if (Sys.getlocale() != baseline$locale) set_locale(baseline$locale)
    paste(unique(why), collapse = "; ")
  }

  # Sets each category of a locale as Sys.getlocale() gives it: one name,
  # or (musl's form) one per category in this order, ";" between them.
  locale_categories <- c("LC_CTYPE", "LC_NUMERIC", "LC_TIME", "LC_COLLATE", "LC_MONETARY", "LC_MESSAGES")
  set_locale <- function(locale) {
    parts <- function(l) rep_len(strsplit(l, ";", fixed = TRUE)[[1]], length(locale_categories))
    want <- parts(locale)
    now <- parts(Sys.getlocale())
    for (i in which(want != now)) {
      try(suppressWarnings(Sys.setlocale(locale_categories[[i]], want[[i]])), silent = TRUE)
    }
  }

  # Sets options() to want: those it lacks are removed.
  set_options <- function(want) {
    now <- options()
    if (identical(now, want)) return(invisible())
    extra <- setdiff(names(now), names(want))
    if (length(extra)) options(stats::setNames(rep(list(NULL), length(extra)), extra))
    options(want)
    invisible()
  }

  # ---- Sessions of a shared session worker (docs/sessions.md) ------------
  #
  # Several sessions of one client live on one session worker, each a
  # namespace: its own environment, which run() evaluates in (its parent is
  # the global environment, empty between calls, so lookups go on to the
  # search path as from the global environment), its working directory,
  # its files (home, /tmp, /output/: moved by main.ts's Module.pyrunFolders,
  # sessions.ts), its random state (.Random.seed, which R keeps in the
  # global environment) and its options(). The rest of R is the worker's,
  # shared by its sessions: attached and loaded packages, base and the
  # namespaces, environment variables, the locale.

  spaces <- new.env(parent = emptyenv()) # namespace -> list(env, wd, seed, options)
  current_ns <- "" # "": none yet (the worker's state before any, kept by nobody)
  env_now <- globalenv() # where run() evaluates

  # Makes ns the namespace of the next call, then forgets those of drop.
  # An interrupt still pending from the call before waits until the switch
  # is whole (main.ts then evaluates enter() again, which finds it done).
  enter <- function(ns, drop = character()) suspendInterrupts({
    g <- globalenv()
    if (!identical(ns, current_ns)) {
      if (nzchar(current_ns)) {
        s <- spaces[[current_ns]]
        s$seed <- get0(".Random.seed", envir = g, inherits = FALSE)
        s$wd <- getwd()
        s$options <- options()
        assign(current_ns, s, envir = spaces)
      }
      if (exists(".Random.seed", envir = g, inherits = FALSE)) rm(".Random.seed", envir = g)
      # Out of the folders before they move.
      setwd("/")
      js(sprintf("Module.pyrunFolders.swap(%s, %s); 0", deparse(current_ns), deparse(ns)))
      dir.create("/output", showWarnings = FALSE) # R's calls find it there, as at the start
      s <- get0(ns, envir = spaces, inherits = FALSE)
      if (is.null(s)) {
        s <- list(env = new.env(parent = g), wd = baseline$wd, seed = NULL, options = baseline$options)
        assign(ns, s, envir = spaces)
      }
      if (!is.null(s$seed)) {
        assign(".Random.seed", s$seed, envir = g) # it holds the generators' kinds too
      } else if (!identical(RNGkind(), baseline$rng)) {
        do.call(RNGkind, as.list(baseline$rng))
        if (exists(".Random.seed", envir = g, inherits = FALSE)) rm(".Random.seed", envir = g)
      }
      set_options(s$options)
      tempdir(check = TRUE) # R's temporary folder, in this session's /tmp
      setwd(if (dir.exists(s$wd)) s$wd else baseline$wd)
      env_now <<- s$env
      current_ns <<- ns
    }
    for (d in drop) {
      if (identical(d, current_ns)) next # a live session's, or a repeat
      if (exists(d, envir = spaces, inherits = FALSE)) rm(list = d, envir = spaces)
      js(sprintf("Module.pyrunFolders.drop(%s); 0", deparse(d)))
    }
    character()
  })

  # After a session's call: what it bound in the global environment itself
  # (assign(envir = globalenv()), <<- at top level, source()) moves into
  # its own environment, so that the next session does not see it; a
  # function made there gets the session's environment as its own, so that
  # it still finds the session's variables. .Random.seed stays: enter()
  # keeps it.
  keep_globals <- function() {
    if (!nzchar(current_ns)) return(invisible())
    g <- globalenv()
    names <- setdiff(ls(g, all.names = TRUE, sorted = FALSE), ".Random.seed")
    for (n in names) {
      try({
        v <- get(n, envir = g, inherits = FALSE)
        if (is.function(v) && !is.primitive(v) && identical(environment(v), g)) environment(v) <- env_now
        assign(n, v, envir = env_now)
      }, silent = TRUE)
    }
    if (length(names)) try(rm(list = names, envir = g), silent = TRUE)
    invisible()
  }

  # The running call's code, which main.ts binds before each call.
  code <- ""
  baseline <- take_baseline()
  unlock_marked <- FALSE # pyrun's own replace_binding() unlocked bindings above
  unlocked <- list()
  lock_marked <- FALSE
  # pyrun's own functions and settings cannot be replaced by a call (they
  # are reachable, from the devices' and debug's bodies): only the state
  # of a call can be set.
  state <- c("code", "current_ns", "env_now", "plots", "plot_count", "call_start", "finalizers_pending", "debug_marked", "unlock_marked",
             "unlocked", "lock_marked", "last_restored")
  lockEnvironment(pyrun, bindings = TRUE)
  invisible(lapply(state, unlock_binding, env = pyrun))
  lock_marked <- FALSE # marked by the lockEnvironment() above

  pyrun
})
