// stoker-workbench: the Qt GUI. `--screenshot FILE --workspace W` renders one
// workspace (offscreen works) and exits, for docs and checks.
#include <QApplication>
#include <QCommandLineParser>
#include <QTimer>
#include <cstdio>

#include "main_window.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setOrganizationName("Stoker");
  QApplication::setApplicationName("stoker-workbench");
  QApplication::setApplicationVersion("0.1.0");

  QCommandLineParser parser;
  parser.setApplicationDescription("Stoker workbench: keep GPUs fed");
  parser.addHelpOption();
  parser.addVersionOption();
  QCommandLineOption workspace("workspace", "Workspace to open: " + stoker::MainWindow::workspaceIds().join('|'),
                               "W");
  QCommandLineOption screenshot("screenshot", "Render the window to FILE.png and exit.", "FILE");
  parser.addOption(workspace);
  parser.addOption(screenshot);
  parser.process(app);

  stoker::MainWindow window;
  if (parser.isSet(workspace) && !window.showWorkspace(parser.value(workspace))) {
    std::fprintf(stderr, "error: --workspace %s: unknown workspace (one of %s)\n",
                 qPrintable(parser.value(workspace)), qPrintable(stoker::MainWindow::workspaceIds().join(", ")));
    return 2;
  }
  if (parser.isSet(screenshot)) {
    window.resize(1100, 720);
    window.show();
    const QString file = parser.value(screenshot);
    int status = 0;
    QTimer::singleShot(0, [&] {
      if (!window.grab().save(file, "PNG")) {
        std::fprintf(stderr, "error: %s: cannot write the screenshot\n", qPrintable(file));
        status = 2;
      }
      QApplication::quit();
    });
    app.exec();
    return status;
  }
  window.show();
  return app.exec();
}
